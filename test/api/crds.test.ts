/**
 * The CRDs: the committed files are exactly what src/api generates (the check that fails the build),
 * they are structural schemas Kubernetes accepts, and they carry the seed's limits with the engine's
 * messages. (A real API server applies them in test/kube.)
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Type from 'typebox';
import { parseAllDocuments } from 'yaml';
import { CRD_DIRS, type CustomResourceDefinition, crds, generatedFiles, renderCrd } from '../../src/api/crd.ts';
import { PLACEMENT_FIELDS, PLACEMENT_MESSAGE, RULES, type ValidationRule } from '../../src/api/crd-rules.ts';
import { DNS1123_LABEL_PATTERN, DNS1123_SUBDOMAIN_PATTERN } from '../../src/api/metadata.ts';
import { GROUP, LIMITS, MESSAGES, VERSION } from '../../src/api/proxmoxvm.ts';
import { QUANTITY_PATTERN } from '../../src/api/quantity.ts';
import { INT_OR_STRING_MAX_LENGTH, type JsonSchema, schemaAt, toStructural } from '../../src/api/structural.ts';

const ROOT = join(import.meta.dirname, '..', '..');

function byKind(kind: string): CustomResourceDefinition {
  const c = crds().find((x) => x.spec.names.kind === kind);
  assert.ok(c, `no CRD for ${kind}`);
  return c;
}

function rootSchema(kind: string): JsonSchema {
  return byKind(kind).spec.versions[0]!.schema.openAPIV3Schema;
}

function rulesAt(node: JsonSchema): ValidationRule[] {
  return (node['x-kubernetes-validations'] as ValidationRule[] | undefined) ?? [];
}

/** Every schema node with its path. */
function* walk(node: JsonSchema, path = ''): Generator<[string, JsonSchema]> {
  yield [path || '<root>', node];
  const props = node.properties as Record<string, JsonSchema> | undefined;
  for (const [k, v] of Object.entries(props ?? {})) yield* walk(v, `${path}.${k}`);
  if (node.items && typeof node.items === 'object') yield* walk(node.items as JsonSchema, `${path}[]`);
  if (node.additionalProperties && typeof node.additionalProperties === 'object') {
    yield* walk(node.additionalProperties as JsonSchema, `${path}.*`);
  }
  for (const b of (node.anyOf as JsonSchema[] | undefined) ?? []) yield* walk(b, `${path}|`);
}

describe('committed CRDs', () => {
  test('are the generated ones (run `npm run gen:crds` when this fails)', () => {
    const files = generatedFiles();
    const problems: string[] = [];
    for (const [rel, text] of files) {
      const abs = join(ROOT, rel);
      if (!existsSync(abs)) problems.push(`${rel}: missing`);
      else if (readFileSync(abs, 'utf8') !== text) problems.push(`${rel}: differs from the generated CRD`);
    }
    for (const dir of CRD_DIRS) {
      const abs = join(ROOT, dir);
      for (const f of existsSync(abs) ? readdirSync(abs) : []) {
        if (!files.has(`${dir}/${f}`)) problems.push(`${dir}/${f}: not generated (stale?)`);
      }
    }
    assert.deepEqual(problems, [], `${problems.join('\n')}\nRun: npm run gen:crds`);
  });

  test('one file per kind in each directory, each a single CRD document', () => {
    const kinds = crds().map((c) => c.spec.names.kind);
    assert.deepEqual(new Set(kinds).size, 8);
    for (const dir of CRD_DIRS) {
      const files = readdirSync(join(ROOT, dir)).sort();
      assert.equal(files.length, kinds.length, dir);
      for (const f of files) {
        const docs = parseAllDocuments(readFileSync(join(ROOT, dir, f), 'utf8'));
        assert.ok(Array.isArray(docs));
        assert.equal(docs.length, 1, `${dir}/${f}: one document (no empty leading document)`);
        const crd = docs[0]!.toJS() as CustomResourceDefinition;
        assert.equal(crd.kind, 'CustomResourceDefinition');
        assert.equal(f, `${crd.spec.group}_${crd.spec.names.plural}.yaml`);
      }
    }
  });

  test('rendering is deterministic', () => {
    assert.equal(renderCrd(byKind('ProxmoxVM')), renderCrd(byKind('ProxmoxVM')));
  });
});

describe('CRD shape', () => {
  test('names, scopes, group and version', () => {
    const want: Record<string, string> = {
      ProxmoxVM: 'Namespaced',
      ProxmoxVMScaleSet: 'Namespaced',
      ProxmoxImage: 'Namespaced',
      ProxmoxTemplate: 'Namespaced',
      ProviderConfig: 'Namespaced',
      ClusterProviderConfig: 'Cluster',
      ProviderConfigUsage: 'Namespaced',
      ClusterProviderConfigUsage: 'Cluster',
    };
    for (const c of crds()) {
      assert.equal(c.apiVersion, 'apiextensions.k8s.io/v1');
      assert.equal(c.spec.group, GROUP);
      assert.equal(c.metadata.name, `${c.spec.names.plural}.${GROUP}`);
      assert.equal(c.spec.scope, want[c.spec.names.kind], c.spec.names.kind);
      assert.equal(c.spec.names.listKind, `${c.spec.names.kind}List`);
      assert.equal(c.spec.versions.length, 1);
      const v = c.spec.versions[0]!;
      assert.equal(v.name, VERSION);
      assert.ok(v.served && v.storage);
    }
  });

  test('categories', () => {
    for (const k of ['ProxmoxVM', 'ProxmoxVMScaleSet', 'ProxmoxImage', 'ProxmoxTemplate']) {
      assert.deepEqual(byKind(k).spec.names.categories, ['crossplane', 'managed', 'proxmox']);
    }
    for (const k of ['ProviderConfig', 'ClusterProviderConfig', 'ProviderConfigUsage', 'ClusterProviderConfigUsage']) {
      assert.deepEqual(byKind(k).spec.names.categories, ['crossplane', 'provider', 'proxmox']);
    }
  });

  test('subresources: status on resources and configs, scale on the scale set, none on usages', () => {
    for (const k of ['ProxmoxVM', 'ProviderConfig', 'ClusterProviderConfig']) {
      assert.deepEqual(byKind(k).spec.versions[0]!.subresources, { status: {} }, k);
    }
    assert.deepEqual(byKind('ProxmoxVMScaleSet').spec.versions[0]!.subresources, {
      status: {},
      scale: {
        specReplicasPath: '.spec.replicas',
        statusReplicasPath: '.status.replicas',
        labelSelectorPath: '.status.selector',
      },
    });
    for (const k of ['ProviderConfigUsage', 'ClusterProviderConfigUsage']) {
      assert.equal(byKind(k).spec.versions[0]!.subresources, undefined, k);
    }
  });

  test('ProxmoxVM printer columns', () => {
    const cols = byKind('ProxmoxVM').spec.versions[0]!.additionalPrinterColumns;
    assert.deepEqual(
      cols.map((c) => [c.name, c.type, c.jsonPath]),
      [
        ['READY', 'string', ".status.conditions[?(@.type=='Ready')].status"],
        ['SYNCED', 'string', ".status.conditions[?(@.type=='Synced')].status"],
        ['EXTERNAL-NAME', 'string', '.metadata.annotations.crossplane\\.io/external-name'],
        ['SITE', 'string', '.status.atProvider.site'],
        ['NODE', 'string', '.status.atProvider.node'],
        ['STATE', 'string', '.status.atProvider.state'],
        ['IP', 'string', '.status.atProvider.ipAddresses[0]'],
        ['PENDING-REBOOT', 'string', ".status.conditions[?(@.type=='PendingReboot')].status"],
        ['AGE', 'date', '.metadata.creationTimestamp'],
      ],
    );
    const ss = byKind('ProxmoxVMScaleSet').spec.versions[0]!.additionalPrinterColumns.map((c) => c.name);
    assert.deepEqual(ss.slice(0, 2), ['READY', 'SYNCED']);
    assert.equal(ss.at(-1), 'AGE');
  });

  test('every printer column points into the schema', () => {
    for (const c of crds()) {
      const root = c.spec.versions[0]!.schema.openAPIV3Schema;
      for (const col of c.spec.versions[0]!.additionalPrinterColumns) {
        if (col.jsonPath.startsWith('.metadata.')) continue;
        const path = col.jsonPath
          .replace(/^\./, '')
          .replace(/\[\?\(@\.type=='\w+'\)\]/g, '[]')
          .replace(/\[(0|\*)\]/g, '[]');
        assert.doesNotThrow(() => schemaAt(root, path), `${c.spec.names.kind} ${col.name}: ${col.jsonPath}`);
      }
    }
  });

  test('Crossplane v2 managed resource fields and their defaults', () => {
    for (const [kind, base] of [
      ['ProxmoxVM', 'spec'],
      ['ProxmoxVMScaleSet', 'spec.template.spec'],
    ] as const) {
      const spec = schemaAt(rootSchema(kind), base);
      assert.deepEqual(spec.required, ['forProvider']);
      const pcr = schemaAt(spec, 'providerConfigRef');
      assert.deepEqual(pcr.default, { kind: 'ClusterProviderConfig', name: 'default' });
      assert.deepEqual(schemaAt(spec, 'providerConfigRef.kind').enum, ['ProviderConfig', 'ClusterProviderConfig']);
      assert.equal(schemaAt(spec, 'providerConfigRef.kind').default, 'ClusterProviderConfig');
      const mp = schemaAt(spec, 'managementPolicies');
      assert.deepEqual(mp.default, ['*']);
      assert.deepEqual((mp.items as JsonSchema).enum, ['Observe', 'Create', 'Update', 'Delete', 'LateInitialize', '*']);
      const wcs = schemaAt(spec, 'writeConnectionSecretToRef');
      assert.deepEqual(Object.keys(wcs.properties as object), ['name'], 'v2: the Secret is in the namespace');
      assert.deepEqual(wcs.required, ['name']);
      assert.ok(schemaAt(spec, 'initProvider'));
    }
    const status = schemaAt(rootSchema('ProxmoxVM'), 'status');
    for (const f of ['atProvider', 'conditions', 'observedGeneration', 'lastHandledReconcileAt']) {
      assert.ok(schemaAt(status, f), f);
    }
    const conditions = schemaAt(status, 'conditions');
    assert.equal(conditions['x-kubernetes-list-type'], 'map');
    assert.deepEqual(conditions['x-kubernetes-list-map-keys'], ['type']);
    for (const f of ['vmId', 'node', 'state', 'qmpStatus', 'ipAddresses', 'lock', 'task', 'pendingChanges']) {
      assert.ok(schemaAt(status, `atProvider.${f}`), f);
    }
  });

  test('usages: providerConfigRef and resourceRef at the top level', () => {
    for (const k of ['ProviderConfigUsage', 'ClusterProviderConfigUsage']) {
      const root = rootSchema(k);
      assert.deepEqual(root.required, ['providerConfigRef', 'resourceRef']);
      assert.deepEqual(Object.keys(schemaAt(root, 'resourceRef').properties as object).sort(), [
        'apiVersion',
        'kind',
        'name',
        'uid',
      ]);
      assert.deepEqual(schemaAt(root, 'providerConfigRef').required, ['kind', 'name']);
      assert.equal((root.properties as Record<string, unknown>).spec, undefined);
    }
  });

  test('the scale set: replicas, template, selector, status counts', () => {
    const root = rootSchema('ProxmoxVMScaleSet');
    assert.equal(schemaAt(root, 'spec.replicas').type, 'integer');
    assert.equal(schemaAt(root, 'spec.replicas').default, 1);
    assert.equal(schemaAt(root, 'spec.template.metadata.labels').additionalProperties instanceof Object, true);
    assert.ok(schemaAt(root, 'spec.selector.matchLabels'));
    for (const f of ['replicas', 'readyReplicas', 'updatedReplicas', 'conditions', 'selector']) {
      assert.ok(schemaAt(root, `status.${f}`), f);
    }
  });
});

describe('structural schemas', () => {
  const FORBIDDEN = [
    'const',
    '$id',
    '$schema',
    '$ref',
    'definitions',
    'errorMessage',
    'patternProperties',
    'uniqueItems',
    'oneOf',
    'allOf',
    'not',
    'examples',
  ];
  for (const c of crds()) {
    test(c.spec.names.kind, () => {
      const root = c.spec.versions[0]!.schema.openAPIV3Schema;
      assert.equal(root.type, 'object');
      assert.equal(root.anyOf, undefined, 'no anyOf at the root');
      assert.deepEqual(Object.keys(root.properties as object).slice(0, 3), ['apiVersion', 'kind', 'metadata']);
      for (const [path, node] of walk(root)) {
        const where = `${c.spec.names.kind} ${path}`;
        for (const k of FORBIDDEN) assert.equal(node[k], undefined, `${where}: ${k}`);
        const intOrString = node['x-kubernetes-int-or-string'] === true;
        const preserve = node['x-kubernetes-preserve-unknown-fields'] === true;
        if (path.endsWith('|')) {
          // An anyOf branch: only the int-or-string pair is allowed, exactly.
          assert.deepEqual(Object.keys(node), ['type'], where);
          continue;
        }
        if (node.anyOf !== undefined) {
          assert.ok(intOrString, `${where}: anyOf only for int-or-string`);
          assert.deepEqual(node.anyOf, [{ type: 'integer' }, { type: 'string' }], where);
        }
        if (intOrString) {
          assert.equal(node.type, undefined, where);
          assert.equal(typeof node.pattern, 'string', `${where}: int-or-string keeps its pattern`);
          assert.equal(typeof node.maxLength, 'number', `${where}: int-or-string is bounded`);
          continue;
        }
        if (!preserve) assert.ok(typeof node.type === 'string', `${where}: has a type`);
        assert.notEqual(node.additionalProperties, false, `${where}: additionalProperties: false`);
        if (node.properties !== undefined) {
          assert.equal(node.additionalProperties, undefined, `${where}: properties and additionalProperties`);
        }
        if (node.type === 'object' && path !== '.metadata') {
          assert.ok(
            node.properties !== undefined || node.additionalProperties !== undefined || preserve,
            `${where}: an object has properties, additionalProperties or preserve-unknown-fields`,
          );
        }
        if (node.type === 'array') assert.ok(node.items, `${where}: items`);
        for (const r of (node.required as string[] | undefined) ?? []) {
          assert.ok((node.properties as Record<string, unknown>)?.[r], `${where}: required ${r} is a property`);
        }
        if (node['x-kubernetes-list-type'] === 'map') {
          const item = node.items as JsonSchema;
          for (const key of node['x-kubernetes-list-map-keys'] as string[]) {
            assert.ok((item.required as string[]).includes(key), `${where}: list map key ${key} is required`);
          }
        }
        if (node.default !== undefined && node.enum !== undefined) {
          assert.ok((node.enum as unknown[]).includes(node.default), `${where}: default in enum`);
        }
      }
    });
  }
});

describe('CEL rules: the seed limits with the engine messages', () => {
  const paths = {
    ProxmoxVM: ['spec.forProvider', 'spec.initProvider'],
    ProxmoxVMScaleSet: ['spec.template.spec.forProvider', 'spec.template.spec.initProvider'],
  };
  for (const [kind, bases] of Object.entries(paths)) {
    for (const base of bases) {
      test(`${kind} ${base}`, () => {
        const fp = schemaAt(rootSchema(kind), base);
        const rule = (field: string) => rulesAt(schemaAt(fp, field));
        assert.deepEqual(rule('name'), [{ rule: RULES.name.rule, message: MESSAGES.name }]);
        assert.deepEqual(rule('cpu'), [{ rule: RULES.cpu.rule, message: MESSAGES.cpu }]);
        assert.deepEqual(rule('memory'), [{ rule: RULES.memory.rule, message: MESSAGES.memory }]);
        assert.deepEqual(rule('disk'), [{ rule: RULES.disk.rule, message: MESSAGES.disk }]);
        // A "Too long" error would keep the API server from evaluating the rule (and the message).
        assert.equal(schemaAt(fp, 'name').maxLength, undefined);
        assert.equal(schemaAt(fp, 'cpu').minimum, LIMITS.cpu.min);
        assert.equal(schemaAt(fp, 'cpu').maximum, LIMITS.cpu.max);
        for (const q of ['memory', 'disk', 'disks[].size']) {
          const node = schemaAt(fp, q);
          assert.equal(node['x-kubernetes-int-or-string'], true, q);
          assert.equal(node.pattern, QUANTITY_PATTERN, q);
        }
        for (const ref of ['cloudInit.passwordSecretRef', 'cloudInit.sshKeysSecretRef']) {
          assert.deepEqual(rulesAt(schemaAt(fp, ref)), [RULES.localSecret], ref);
        }
      });
    }
  }

  test('the rules encode LIMITS (bare numbers in the engine units)', () => {
    assert.equal(RULES.cpu.rule, 'self >= 1 && self <= 1024');
    assert.match(RULES.name.rule, /^size\(self\) >= 1 && size\(self\) <= 100 && self\.matches\('/);
    // CEL string literal: backslashes doubled.
    assert.ok(RULES.name.rule.includes('(\\\\.[a-zA-Z0-9]'));
    const mem = RULES.memory.rule;
    assert.ok(mem.startsWith('type(self) == int ? self >= 128 && self <= 2097152'), mem);
    assert.ok(mem.includes("quantity('128Mi')") && mem.includes("quantity('2Ti')"));
    assert.ok(mem.includes("quantity('128')") && mem.includes("quantity('2097152')"), 'bare MiB');
    assert.ok(mem.includes("self.replace('K', 'k')"), 'K is decimal kilo, as in the engine');
    const disk = RULES.disk.rule;
    assert.ok(disk.startsWith('type(self) == int ? self >= 1 && self <= 102400'), disk);
    assert.ok(disk.includes("quantity('1Gi')") && disk.includes("quantity('100Ti')"));
  });

  test('ProxmoxVM: metadata.name is the VM name unless forProvider.name is set', () => {
    const rules = rulesAt(rootSchema('ProxmoxVM'));
    assert.ok(rules[0]!.message.startsWith(MESSAGES.name));
    assert.equal(rules[0]!.rule, 'has(self.spec.forProvider.name) || size(self.metadata.name) <= 100');
  });

  test('ProxmoxVM: vmid is immutable while the VM exists (a root transition rule); node and site are not (migrations)', () => {
    const rules = rulesAt(rootSchema('ProxmoxVM')).slice(1);
    assert.deepEqual([...PLACEMENT_FIELDS], ['vmid']);
    assert.deepEqual(
      rules.map((r) => [r.fieldPath, r.reason]),
      PLACEMENT_FIELDS.map((f) => [`.spec.forProvider.${f}`, 'FieldValueForbidden']),
    );
    for (const [i, f] of PLACEMENT_FIELDS.entries()) {
      const r = rules[i]!;
      assert.equal(r.message, PLACEMENT_MESSAGE);
      assert.match(r.message, /a VMID is the identity of a VM; revert the field, or delete and recreate/);
      // Gated on the old object's vmId, comparing presence and value (unset -> set is a change).
      assert.ok(
        r.rule.startsWith(
          '!has(oldSelf.status) || !has(oldSelf.status.atProvider) || !has(oldSelf.status.atProvider.vmId) || ',
        ),
        r.rule,
      );
      assert.ok(r.rule.includes(`has(self.spec.forProvider.${f}) == has(oldSelf.spec.forProvider.${f})`), r.rule);
      assert.ok(r.rule.includes(`self.spec.forProvider.${f} == oldSelf.spec.forProvider.${f}`), r.rule);
    }
    // Not on the scale set's template: its replicas are ProxmoxVMs, which carry the rule themselves.
    assert.equal(rulesAt(rootSchema('ProxmoxVMScaleSet')).length, 0);
  });

  test('references to other objects are DNS-1123 subdomains (they go into API paths)', () => {
    const vm = rootSchema('ProxmoxVM');
    for (const path of [
      'spec.providerConfigRef.name',
      'spec.writeConnectionSecretToRef.name',
      'spec.forProvider.cloudInit.passwordSecretRef.name',
      'spec.forProvider.cloudInit.sshKeysSecretRef.name',
      'spec.initProvider.cloudInit.passwordSecretRef.name',
    ]) {
      assert.equal(schemaAt(vm, path).pattern, DNS1123_SUBDOMAIN_PATTERN, path);
      assert.equal(schemaAt(vm, path).maxLength, 253, path);
    }
    for (const kind of ['ProviderConfig', 'ClusterProviderConfig']) {
      const root = rootSchema(kind);
      for (const path of ['spec.credentials.secretRef', 'spec.sites[].credentialsSecretRef']) {
        assert.equal(schemaAt(root, `${path}.name`).pattern, DNS1123_SUBDOMAIN_PATTERN, `${kind} ${path}`);
        assert.equal(schemaAt(root, `${path}.namespace`).pattern, DNS1123_LABEL_PATTERN, `${kind} ${path}`);
      }
    }
    const re = new RegExp(DNS1123_SUBDOMAIN_PATTERN);
    for (const bad of ['../x', 'a..b', 'A', 'a/b', 'a\nb', '-a', 'a.']) assert.equal(re.test(bad), false, bad);
    for (const good of ['a', 'web-01', 'vm.passwords.v2', '0']) assert.equal(re.test(good), true, good);
  });

  test('provider configs: credentials, VMID ranges, namespaces of Secrets', () => {
    const cluster = rootSchema('ClusterProviderConfig');
    const ns = rootSchema('ProviderConfig');
    for (const root of [cluster, ns]) {
      assert.ok(rulesAt(schemaAt(root, 'spec')).some((r) => r.message.includes('credentials.secretRef is required')));
      assert.equal(rulesAt(schemaAt(root, 'spec.vmidRange'))[0]!.rule, 'self.min <= self.max');
      assert.equal(rulesAt(schemaAt(root, 'spec.sites[].vmidRange'))[0]!.rule, 'self.min <= self.max');
      assert.equal(schemaAt(root, 'spec.sites')['x-kubernetes-list-type'], 'map');
      // string | list of strings: not structural, kept as is (the engine validates it).
      assert.equal(schemaAt(root, 'spec.sites[].tls.fingerprint')['x-kubernetes-preserve-unknown-fields'], true);
    }
    assert.match(rulesAt(schemaAt(cluster, 'spec.credentials'))[0]!.message, /required in a ClusterProviderConfig/);
    assert.match(rulesAt(schemaAt(ns, 'spec.credentials'))[0]!.message, /not allowed in a ProviderConfig/);
  });
});

describe('toStructural', () => {
  test('literal unions become enums', () => {
    assert.deepEqual(toStructural(Type.Union([Type.Literal('a'), Type.Literal('b')])), {
      type: 'string',
      enum: ['a', 'b'],
    });
    assert.deepEqual(toStructural(Type.Literal(3)), { type: 'number', enum: [3] });
  });

  test('string | integer becomes int-or-string with the branch validations', () => {
    const s = toStructural(
      Type.Union([Type.String({ pattern: '^[0-9]+Gi$' }), Type.Integer({ minimum: 1 })], { description: 'size' }),
    );
    assert.deepEqual(s, {
      description: 'size',
      'x-kubernetes-int-or-string': true,
      anyOf: [{ type: 'integer' }, { type: 'string' }],
      minimum: 1,
      pattern: '^[0-9]+Gi$',
      maxLength: INT_OR_STRING_MAX_LENGTH,
    });
    assert.equal(toStructural(Type.Union([Type.String({ maxLength: 8 }), Type.Integer()])).maxLength, 8);
  });

  test('other unions keep unknown fields and say what they accept', () => {
    const s = toStructural(Type.Union([Type.String(), Type.Array(Type.String())], { description: 'fp.' }));
    assert.deepEqual(s, {
      description: 'fp. One of: a string; a list (each a string).',
      'x-kubernetes-preserve-unknown-fields': true,
    });
  });

  test('objects: additionalProperties false dropped, records, free-form objects', () => {
    assert.deepEqual(toStructural(Type.Object({ a: Type.String() }, { additionalProperties: false })), {
      type: 'object',
      properties: { a: { type: 'string' } },
      required: ['a'],
    });
    assert.deepEqual(toStructural(Type.Record(Type.String(), Type.Integer())), {
      type: 'object',
      additionalProperties: { type: 'integer' },
    });
    assert.deepEqual(toStructural(Type.Object({})), { type: 'object', 'x-kubernetes-preserve-unknown-fields': true });
    assert.deepEqual(toStructural(Type.Unknown()), { 'x-kubernetes-preserve-unknown-fields': true });
    assert.deepEqual(toStructural(Type.Object({ a: Type.Optional(Type.Boolean()) }, { additionalProperties: true })), {
      type: 'object',
      properties: { a: { type: 'boolean' } },
      'x-kubernetes-preserve-unknown-fields': true,
    });
  });

  test('TypeBox-only keywords are dropped; Kubernetes extensions kept; JSON Schema bounds converted', () => {
    assert.deepEqual(toStructural(Type.String({ errorMessage: 'x', $id: 'y', minLength: 2 })), {
      type: 'string',
      minLength: 2,
    });
    assert.deepEqual(toStructural(Type.Array(Type.String(), { 'x-kubernetes-list-type': 'set', maxItems: 3 })), {
      type: 'array',
      items: { type: 'string' },
      maxItems: 3,
      'x-kubernetes-list-type': 'set',
    });
    assert.deepEqual(toStructural(Type.Integer({ exclusiveMinimum: 0 })), {
      type: 'integer',
      minimum: 0,
      exclusiveMinimum: true,
    });
    assert.deepEqual(toStructural({ type: 'array', items: { type: 'string' }, uniqueItems: true }), {
      type: 'array',
      items: { type: 'string' },
      'x-kubernetes-list-type': 'set',
    });
  });

  test('what cannot be represented is an error, not a silent loss', () => {
    assert.throws(() => toStructural({ type: 'string', if: {} }), /unsupported JSON Schema keyword 'if'/);
    assert.throws(() => toStructural({ type: 'string', format: 'regex' }), /format/);
    assert.throws(
      () => toStructural({ type: 'object', patternProperties: { '^a': { type: 'string' } } }),
      /record keys restricted/,
    );
    assert.throws(() => toStructural({ type: 'array' }), /items/);
    assert.throws(() => toStructural({ type: 'null' }), /unsupported type/);
    assert.throws(() => toStructural(Type.Union([Type.String(), Type.Integer({ pattern: 'x' })])), /keyword 'pattern'/);
  });

  test('errors name the node', () => {
    assert.throws(
      () => toStructural(Type.Object({ a: Type.Object({ b: { type: 'string', contains: {} } }) })),
      /\$\.a\.b: unsupported JSON Schema keyword 'contains'/,
    );
  });
});
