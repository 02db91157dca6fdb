/**
 * The install manifests (deploy/, the Helm chart, package/): they parse, they are the kinds and API
 * versions we mean, the Deployment runs as the ServiceAccount with probes and a locked-down security
 * context, and the RBAC covers what the controller uses (CONTROLLER_PERMISSIONS) and no more.
 * When `helm` is on the PATH, the rendered chart is checked the same way.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, test } from 'node:test';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { crdFileName, crds } from '../../src/api/crd.ts';
import { CONTROLLER_PERMISSIONS } from '../../src/api/permissions.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const CHART = join(ROOT, 'deploy', 'helm', 'provider-proxmox');

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [k: string]: unknown;
}

interface Rule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

const API_VERSIONS: Record<string, string> = {
  Namespace: 'v1',
  ServiceAccount: 'v1',
  Service: 'v1',
  ClusterRole: 'rbac.authorization.k8s.io/v1',
  ClusterRoleBinding: 'rbac.authorization.k8s.io/v1',
  Role: 'rbac.authorization.k8s.io/v1',
  RoleBinding: 'rbac.authorization.k8s.io/v1',
  Deployment: 'apps/v1',
  CustomResourceDefinition: 'apiextensions.k8s.io/v1',
  Kustomization: 'kustomize.config.k8s.io/v1beta1',
  Provider: 'meta.pkg.crossplane.io/v1',
};

function yamlFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) {
      // Helm templates are Go templates, not YAML: checked through `helm template` below.
      if (relative(CHART, p) === 'templates') continue;
      out.push(...yamlFiles(p));
    } else if (/\.ya?ml$/.test(name)) {
      out.push(p);
    }
  }
  return out.sort();
}

/** Every document of a multi-document YAML text; parse errors fail. */
function docsOf(text: string, where: string): unknown[] {
  const docs = parseAllDocuments(text);
  assert.ok(Array.isArray(docs), where);
  return docs.map((d, i) => {
    assert.deepEqual(
      d.errors.map((e) => e.message),
      [],
      `${where} document ${i + 1}`,
    );
    return d.toJS() as unknown;
  });
}

function objectsOf(file: string): K8sObject[] {
  return docsOf(readFileSync(file, 'utf8'), relative(ROOT, file)).filter((d) => d !== null) as K8sObject[];
}

const NON_OBJECT_FILES = new Set([
  'deploy/helm/provider-proxmox/Chart.yaml',
  'deploy/helm/provider-proxmox/values.yaml',
  'deploy/helm/provider-proxmox/files/clusterrole-rules.yaml',
  // Prometheus rule files (`groups:`), checked by promtool in the Kubernetes suite.
  'deploy/helm/provider-proxmox/files/prometheus-rules.yaml',
  'deploy/monitoring/prometheus-rules.yaml',
]);

function manifestFiles(): string[] {
  return [...yamlFiles(join(ROOT, 'deploy')), ...yamlFiles(join(ROOT, 'package'))].filter(
    (f) => !NON_OBJECT_FILES.has(relative(ROOT, f)),
  );
}

/** The plain install: deploy/*.yaml (not the CRDs, not the chart). */
function plainObjects(): K8sObject[] {
  return readdirSync(join(ROOT, 'deploy'))
    .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
    .flatMap((f) => objectsOf(join(ROOT, 'deploy', f)));
}

function one(objs: K8sObject[], kind: string, name?: string): K8sObject {
  const found = objs.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  assert.equal(found.length, 1, `exactly one ${kind}${name ? ` ${name}` : ''}`);
  return found[0]!;
}

function covers(rules: Rule[], group: string, resource: string, verb: string): boolean {
  return rules.some((r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes(verb));
}

/** The checks every install (plain manifests, rendered chart) must pass. */
function checkInstall(objs: K8sObject[], label: string): void {
  const dep = one(objs, 'Deployment');
  const ns = dep.metadata.namespace;
  assert.ok(ns, `${label}: the Deployment has a namespace`);
  const pod = (dep.spec as { template: { spec: Record<string, unknown> } }).template.spec as {
    serviceAccountName: string;
    securityContext: Record<string, unknown>;
    containers: Array<Record<string, unknown>>;
  };

  // The ServiceAccount it runs as exists, in its namespace.
  const sa = one(objs, 'ServiceAccount', pod.serviceAccountName);
  assert.equal(sa.metadata.namespace, ns, `${label}: ServiceAccount namespace`);

  // Selector matches the pod labels.
  const spec = dep.spec as {
    selector: { matchLabels: Record<string, string> };
    template: { metadata: { labels: Record<string, string> } };
  };
  for (const [k, v] of Object.entries(spec.selector.matchLabels)) {
    assert.equal(spec.template.metadata.labels[k], v, `${label}: selector label ${k}`);
  }

  // The controller container: image, probes, ports, resources, security.
  assert.equal(pod.containers.length, 1);
  const c = pod.containers[0] as {
    image: string;
    args?: string[];
    ports: Array<{ name: string; containerPort: number }>;
    livenessProbe: { httpGet: { path: string; port: string | number } };
    readinessProbe: { httpGet: { path: string; port: string | number } };
    resources: { requests: Record<string, string>; limits: Record<string, string> };
    securityContext: Record<string, unknown>;
    env: Array<{ name: string }>;
  };
  assert.match(c.image, /^[\w.-]+(\/[\w.-]+)+:[\w.-]+$/, `${label}: image with a tag`);
  const port = (p: string | number) => (typeof p === 'number' ? p : c.ports.find((x) => x.name === p)?.containerPort);
  assert.equal(c.livenessProbe.httpGet.path, '/healthz');
  assert.equal(port(c.livenessProbe.httpGet.port), 8081);
  assert.equal(c.readinessProbe.httpGet.path, '/readyz');
  assert.equal(port(c.readinessProbe.httpGet.port), 8081);
  assert.equal(port('metrics'), 8080);
  for (const r of ['cpu', 'memory']) {
    assert.ok(c.resources.requests[r], `${label}: requests.${r}`);
    assert.ok(c.resources.limits[r], `${label}: limits.${r}`);
  }
  assert.deepEqual(
    c.env.map((e) => e.name).filter((n) => n.startsWith('POD_')),
    ['POD_NAME', 'POD_NAMESPACE'],
  );
  assert.equal(pod.securityContext.runAsNonRoot, true);
  assert.ok((pod.securityContext.runAsUser as number) > 0);
  assert.deepEqual(pod.securityContext.seccompProfile, { type: 'RuntimeDefault' });
  assert.equal(c.securityContext.runAsNonRoot, true);
  assert.equal(c.securityContext.readOnlyRootFilesystem, true);
  assert.equal(c.securityContext.allowPrivilegeEscalation, false);
  assert.deepEqual(c.securityContext.capabilities, { drop: ['ALL'] });
  assert.deepEqual(c.securityContext.seccompProfile, { type: 'RuntimeDefault' });

  // RBAC: bound to the ServiceAccount, covering CONTROLLER_PERMISSIONS, nothing wild.
  const cr = one(objs, 'ClusterRole');
  const crb = one(objs, 'ClusterRoleBinding');
  const role = one(objs, 'Role');
  const rb = one(objs, 'RoleBinding');
  assert.equal(role.metadata.namespace, ns, `${label}: the leader election Role is in the controller namespace`);
  assert.equal(rb.metadata.namespace, ns);
  for (const [binding, target] of [
    [crb, cr],
    [rb, role],
  ] as const) {
    const b = binding as unknown as {
      roleRef: { kind: string; name: string };
      subjects: Array<{ kind: string; name: string; namespace: string }>;
    };
    assert.equal(b.roleRef.kind, target.kind);
    assert.equal(b.roleRef.name, target.metadata.name);
    assert.deepEqual(b.subjects, [{ kind: 'ServiceAccount', name: sa.metadata.name, namespace: ns }]);
  }
  const clusterRules = cr.rules as Rule[];
  const nsRules = role.rules as Rule[];
  for (const p of CONTROLLER_PERMISSIONS) {
    const rules = p.scope === 'cluster' ? clusterRules : nsRules;
    for (const res of p.resources) {
      for (const verb of p.verbs) {
        assert.ok(covers(rules, p.apiGroup, res, verb), `${label}: ${verb} ${p.apiGroup || 'core'}/${res} (${p.why})`);
      }
    }
  }
  // ... and nothing beyond it.
  const allowed = (scope: 'cluster' | 'namespace', g: string, r: string, v: string) =>
    CONTROLLER_PERMISSIONS.some(
      (p) => p.scope === scope && p.apiGroup === g && p.resources.includes(r) && p.verbs.includes(v),
    );
  for (const [scope, rules] of [
    ['cluster', clusterRules],
    ['namespace', nsRules],
  ] as const) {
    for (const r of rules) {
      for (const g of r.apiGroups) {
        for (const res of r.resources) {
          for (const v of r.verbs) {
            assert.ok(allowed(scope, g, res, v), `${label}: ${scope} rule grants ${v} ${g || 'core'}/${res}`);
          }
        }
      }
    }
  }
  assert.ok(!covers(clusterRules, '', 'secrets', 'list') && !covers(clusterRules, '', 'secrets', 'watch'));
}

describe('every YAML file in deploy/ and package/', () => {
  test('parses, and each document is a known kind with its API version', () => {
    const files = manifestFiles();
    assert.ok(files.length >= 20, `found ${files.length}`);
    for (const f of files) {
      const objs = objectsOf(f);
      assert.ok(objs.length > 0, relative(ROOT, f));
      for (const o of objs) {
        const where = `${relative(ROOT, f)}: ${o.kind}`;
        assert.ok(o.kind in API_VERSIONS, `${where}: unexpected kind`);
        assert.equal(o.apiVersion, API_VERSIONS[o.kind], where);
        if (o.kind !== 'Kustomization') assert.ok(o.metadata?.name, `${where}: has a name`);
      }
    }
  });

  test('the chart files parse too', () => {
    for (const f of ['Chart.yaml', 'values.yaml', 'files/clusterrole-rules.yaml']) {
      docsOf(readFileSync(join(CHART, f), 'utf8'), f);
    }
  });
});

describe('plain manifests (deploy/)', () => {
  test('Deployment, ServiceAccount, RBAC', () => {
    const objs = plainObjects();
    checkInstall(objs, 'deploy/');
    const ns = one(objs, 'Namespace');
    assert.equal(ns.metadata.name, one(objs, 'Deployment').metadata.namespace);
    assert.equal(ns.metadata.labels?.['pod-security.kubernetes.io/enforce'], 'restricted');
  });

  test('kustomization.yaml lists every manifest and every CRD', () => {
    const k = parseYaml(readFileSync(join(ROOT, 'deploy', 'kustomization.yaml'), 'utf8')) as { resources: string[] };
    const want = [
      ...crds().map((c) => `crds/${crdFileName(c)}`),
      ...readdirSync(join(ROOT, 'deploy')).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml'),
    ].sort();
    assert.deepEqual([...k.resources].sort(), want);
    for (const r of k.resources) assert.ok(existsSync(join(ROOT, 'deploy', r)), r);
  });
});

describe('Helm chart', () => {
  test('Chart.yaml and values.yaml', () => {
    const chart = parseYaml(readFileSync(join(CHART, 'Chart.yaml'), 'utf8')) as Record<string, string>;
    assert.equal(chart.apiVersion, 'v2');
    assert.equal(chart.name, 'provider-proxmox');
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    assert.equal(chart.appVersion, pkg.version);
    const values = parseYaml(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as {
      ports: { metrics: number; health: number };
      securityContext: unknown;
      podSecurityContext: unknown;
      resources: unknown;
    };
    assert.deepEqual(values.ports, { metrics: 8080, health: 8081 });
    // The chart's defaults are the plain manifests' settings.
    const dep = one(plainObjects(), 'Deployment') as unknown as {
      spec: {
        template: {
          spec: { securityContext: unknown; containers: Array<{ securityContext: unknown; resources: unknown }> };
        };
      };
    };
    assert.deepEqual(values.securityContext, dep.spec.template.spec.containers[0]!.securityContext);
    assert.deepEqual(values.podSecurityContext, dep.spec.template.spec.securityContext);
    assert.deepEqual(values.resources, dep.spec.template.spec.containers[0]!.resources);
  });

  test('the ClusterRole rules are the plain manifests’ rules', () => {
    const chartRules = parseYaml(readFileSync(join(CHART, 'files', 'clusterrole-rules.yaml'), 'utf8')) as Rule[];
    assert.deepEqual(chartRules, one(plainObjects(), 'ClusterRole').rules);
  });

  test('templates: every object of the install', () => {
    const dir = join(CHART, 'templates');
    const text = readdirSync(dir)
      .map((f) => readFileSync(join(dir, f), 'utf8'))
      .join('\n');
    for (const kind of ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'Deployment']) {
      assert.match(text, new RegExp(`^kind: ${kind}$`, 'm'), kind);
    }
    assert.match(text, /\.Files\.Get "files\/clusterrole-rules\.yaml"/);
  });

  const helm = spawnSync('helm', ['version', '--short'], { encoding: 'utf8' });
  test('renders (helm template) to a complete install', { skip: helm.status !== 0 && 'helm is not installed' }, () => {
    const kube = ['--kube-version', '1.36.0'];
    const r = spawnSync('helm', ['template', 'provider-proxmox', CHART, '--namespace', 'crossplane-system', ...kube], {
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    const objs = (docsOf(r.stdout, 'helm template') as K8sObject[]).filter((o) => o !== null);
    checkInstall(objs, 'helm');
    for (const o of objs) assert.equal(o.apiVersion, API_VERSIONS[o.kind], o.kind);
    const withCrds = spawnSync('helm', ['template', 'x', CHART, '--include-crds', ...kube], { encoding: 'utf8' });
    assert.equal(withCrds.status, 0, withCrds.stderr);
    const crdNames = (docsOf(withCrds.stdout, 'helm template --include-crds') as K8sObject[])
      .filter((o) => o?.kind === 'CustomResourceDefinition')
      .map((o) => o.metadata.name)
      .sort();
    assert.deepEqual(
      crdNames,
      crds()
        .map((c) => c.metadata.name)
        .sort(),
    );
  });
});

describe('Crossplane package (package/)', () => {
  test('crossplane.yaml: a Provider for Crossplane v2 with safe-start', () => {
    const [meta] = objectsOf(join(ROOT, 'package', 'crossplane.yaml')) as Array<
      K8sObject & {
        metadata: { annotations: Record<string, string> };
        spec: { crossplane: { version: string }; capabilities: string[] };
      }
    >;
    assert.equal(meta!.kind, 'Provider');
    for (const a of ['maintainer', 'source', 'license', 'description', 'readme']) {
      assert.ok(meta!.metadata.annotations[`meta.crossplane.io/${a}`]?.trim(), a);
    }
    assert.equal(meta!.spec.crossplane.version, '>=v2.0.0');
    assert.deepEqual(meta!.spec.capabilities, ['safe-start']);
  });

  test('holds only crossplane.yaml and the CRDs', () => {
    assert.deepEqual(readdirSync(join(ROOT, 'package')).sort(), ['crds', 'crossplane.yaml']);
    const kinds = readdirSync(join(ROOT, 'package', 'crds')).flatMap((f) =>
      objectsOf(join(ROOT, 'package', 'crds', f)).map((o) => o.kind),
    );
    assert.deepEqual(new Set(kinds), new Set(['CustomResourceDefinition']));
  });
});

describe('Dockerfile', () => {
  const text = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
  const instructions = text
    .split('\n')
    .filter((l) => l.trim() && !l.trimStart().startsWith('#'))
    .join('\n');

  test('multi-stage on Node 24: npm ci + npm run build, production dependencies only at runtime', () => {
    const froms = [...instructions.matchAll(/^FROM (\S+)(?: AS (\w+))?$/gm)].map((m) => [m[1], m[2]]);
    assert.ok(froms.length >= 2, 'multi-stage');
    assert.match(instructions, /^ARG NODE_VERSION=24$/m);
    for (const [image] of froms.slice(0, -1)) assert.match(image!, /^node:\$\{NODE_VERSION\}/);
    assert.match(froms.at(-1)![0]!, /^gcr\.io\/distroless\/nodejs24-/);
    assert.match(instructions, /RUN npm ci\b/);
    assert.match(instructions, /RUN npm run build$/m);
    assert.match(instructions, /npm ci --omit=dev/);
    const runtime = instructions.slice(instructions.lastIndexOf('FROM '));
    const copies = [...runtime.matchAll(/^COPY (?:--from=\w+ )?(\S+)/gm)].map((m) => m[1]);
    assert.deepEqual(copies, ['/src/node_modules', '/src/dist', 'package.json']);
  });

  test('runs `provider-proxmox controller` as a numeric non-root user', () => {
    const user = /^USER (\d+)(?::(\d+))?$/m.exec(instructions);
    assert.ok(user && Number(user[1]) > 0, 'numeric non-root USER');
    assert.match(instructions, /^ENTRYPOINT \[.*"\/app\/dist\/cli\/main\.js", "controller"\]$/m);
  });

  test('.dockerignore keeps the context to what the build reads', () => {
    const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8');
    assert.match(ignore, /^\*$/m);
    for (const f of [
      'package.json',
      'package-lock.json',
      'tsconfig.json',
      'tsconfig.build.json',
      'scripts/build.ts',
      'src/',
    ]) {
      assert.ok(ignore.includes(`!${f}`), f);
    }
  });
});
