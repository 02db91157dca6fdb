/**
 * The typed documents of `status` and `status --live` (src/local/status-list.ts): values typed
 * (numbers, booleans, RFC 3339, lists), every key present, valid against the published schema,
 * the same in JSON and YAML, and every field documented in docs/output.md. And where output goes
 * (src/local/output.ts): with -o json|yaml stdout holds the document alone.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import type { ProxmoxVM } from '../../src/api/proxmoxvm.ts';
import { outputFor } from '../../src/local/output.ts';
import { formatLive, formatRows, formatRowsLine, type LiveView, table } from '../../src/local/render.ts';
import { rowOf } from '../../src/local/resource-view.ts';
import {
  LiveItemSchema,
  LiveStatusSchema,
  parseStatusList,
  StatusItemSchema,
  StatusListSchema,
  schemaErrors,
} from '../../src/local/status-list.ts';
import { capture } from '../helpers/capture.ts';

const CREATED = '2026-01-01T00:00:00Z';
const NOW = Date.parse('2026-01-01T00:18:30Z');

function vm(name: string, o: { vmid?: string; ready?: 'True' | 'False'; pending?: string[]; phase?: string } = {}) {
  return {
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: {
      name,
      namespace: 'prod',
      uid: `uid-${name}`,
      creationTimestamp: CREATED,
      annotations: {
        ...(o.phase ? { 'proxmox.sankofa.io/phase': o.phase } : {}),
        ...(o.vmid ? { 'crossplane.io/external-name': o.vmid } : {}),
      },
    },
    spec: { forProvider: { site: 'site-1' } },
    status: o.ready
      ? {
          atProvider: {
            node: 'ml110-01',
            state: 'running',
            step: o.ready === 'True' ? 'Ready' : 'Create',
            ipAddresses: ['198.51.100.7', 'fd00::7'],
            ...(o.pending ? { pendingChanges: o.pending } : {}),
          },
          conditions: [
            { type: 'Ready', status: o.ready, reason: 'Available', lastTransitionTime: CREATED },
            {
              type: 'Synced',
              status: o.ready,
              reason: o.ready === 'True' ? 'ReconcileSuccess' : 'BridgeNotFound',
              ...(o.ready === 'False' ? { message: "bridge 'vmbr9' does not exist" } : {}),
              lastTransitionTime: CREATED,
            },
          ],
        }
      : undefined,
  } as unknown as ProxmoxVM;
}

const rows = [
  rowOf(vm('web', { vmid: '102', ready: 'True', pending: ['memory', 'cores'], phase: '2' }), NOW),
  rowOf(vm('broken', { ready: 'False' }), NOW),
  rowOf(vm('new'), NOW),
];

describe('the StatusList document', () => {
  it('typed values: numbers, booleans and null, lists, RFC 3339 and seconds', () => {
    const doc = parseStatusList(formatRows(rows, 'json', { now: NOW }));
    assert.equal(doc.apiVersion, 'provider-proxmox/v1');
    assert.equal(doc.kind, 'StatusList');
    assert.equal(doc.generatedAt, '2026-01-01T00:18:30Z');
    assert.deepEqual(doc.items[0], {
      namespace: 'prod',
      name: 'web',
      phase: '2',
      site: 'site-1',
      node: 'ml110-01',
      vmid: 102,
      state: 'running',
      ipAddresses: ['198.51.100.7', 'fd00::7'],
      ready: true,
      synced: true,
      step: 'Ready',
      pendingChanges: ['memory', 'cores'],
      pendingReboot: true,
      createdAt: CREATED,
      ageSeconds: 1110,
      reason: null,
      message: null,
    });
    assert.deepEqual(
      doc.items.map((i) => [i.name, i.vmid, i.ready, i.synced, i.reason, i.message, i.state, i.node]),
      [
        ['web', 102, true, true, null, null, 'running', 'ml110-01'],
        ['broken', null, false, false, 'BridgeNotFound', "bridge 'vmbr9' does not exist", 'running', 'ml110-01'],
        ['new', null, null, null, null, null, null, null],
      ],
    );
    assert.equal(doc.items[2]!.step, 'Pending');
  });

  it('YAML is the same document; an empty list is a list; --watch lines are StatusLists', () => {
    assert.deepEqual(parse(formatRows(rows, 'yaml', { now: NOW })), JSON.parse(formatRows(rows, 'json', { now: NOW })));
    assert.deepEqual(parseStatusList(formatRows([], 'json')).items, []);
    const line = formatRowsLine(rows, NOW);
    assert.ok(!line.includes('\n'));
    assert.equal(parseStatusList(line).items.length, 3);
  });

  it('the schema refuses what is not a v1 StatusList (the old array of strings, a string vmid)', () => {
    assert.throws(
      () => parseStatusList('[{"name":"web","vmid":"100","ready":"True"}]'),
      /not a provider-proxmox\/v1 StatusList/,
    );
    const doc = JSON.parse(formatRows(rows, 'json', { now: NOW }));
    doc.items[0].vmid = '102';
    assert.notDeepEqual(schemaErrors(StatusListSchema, doc), []);
  });

  it('the table keeps its columns and shows PENDING only when a VM has pending changes (- for the others)', () => {
    const t = table(rows).split('\n');
    assert.match(t[0]!, /^NAME\s+PHASE\s+SITE\s+NODE\s+VMID\s+STATE\s+IP\s+READY\s+SYNCED\s+PENDING\s+AGE\s+MESSAGE$/);
    assert.match(
      t[1]!,
      /^web\s+2\s+site-1\s+ml110-01\s+102\s+running\s+198\.51\.100\.7\s+True\s+True\s+memory,cores\s+18m$/,
    );
    assert.match(t[2]!, /^broken\s.*\sFalse\s+False\s+-\s+18m\s+BridgeNotFound: bridge 'vmbr9' does not exist$/);
    assert.doesNotMatch(table(rows.slice(1)), /PENDING/);
  });
});

describe('the LiveStatus document', () => {
  const view: LiveView = {
    installation: 'cli-default',
    vms: [
      {
        name: 'prod/web',
        site: 'site-1',
        node: 'ml110-01',
        vmid: 102,
        state: 'running',
        lock: '',
        inState: 'yes',
        marker: 'current',
        uid: 'u1',
      },
      {
        name: 'prod/old',
        site: 'site-1',
        node: 'ml110-01',
        vmid: 7001,
        state: 'stopped',
        lock: 'backup',
        inState: '—',
        marker: 'legacy',
        uid: 'u2',
      },
    ],
    elsewhere: [{ installation: 'team-b', site: 'site-1', vms: 2 }],
    copies: [{ site: 'site-1', node: 'ml110-01', vmid: 150, name: 'prod/web', writtenFor: 102 }],
    errors: [],
  };

  it('typed: inState a boolean or null, lock null when none, namespace and name apart; valid; YAML the same', () => {
    const doc = JSON.parse(formatLive(view, 'json'));
    assert.deepEqual(schemaErrors(LiveStatusSchema, doc), []);
    assert.equal(doc.kind, 'LiveStatus');
    assert.equal(doc.stateFile, null);
    assert.deepEqual(
      doc.items.map((i: Record<string, unknown>) => [i.namespace, i.name, i.vmid, i.lock, i.inState, i.marker]),
      [
        ['prod', 'web', 102, null, true, 'current'],
        ['prod', 'old', 7001, 'backup', null, 'legacy'],
      ],
    );
    assert.deepEqual(doc.copies, [
      { site: 'site-1', node: 'ml110-01', vmid: 150, namespace: 'prod', name: 'web', writtenFor: 102 },
    ]);
    const y = parse(formatLive(view, 'yaml'));
    delete y.generatedAt;
    delete doc.generatedAt;
    assert.deepEqual(y, doc);
  });
});

describe('docs/output.md', () => {
  it('documents every field of both documents', () => {
    const doc = readFileSync(new URL('../../docs/output.md', import.meta.url), 'utf8');
    for (const schema of [StatusItemSchema, LiveItemSchema, StatusListSchema, LiveStatusSchema])
      for (const field of Object.keys(schema.properties))
        assert.ok(doc.includes(`\`${field}\``) || doc.includes(`\`${field}[]\``), `docs/output.md names \`${field}\``);
  });
});

describe('where output goes', () => {
  it('-o table: result and summary on stdout, progress on stdout; -o json|yaml: stdout only the document', () => {
    for (const output of ['table', 'json', 'yaml'] as const)
      for (const quiet of [false, true]) {
        const out = capture();
        const err = capture();
        const o = outputFor({ output, quiet, out: out.out, err: err.out });
        o.result('RESULT');
        o.say('all 2 VMs ready');
        o.note('note: old place');
        const where = `${output}${quiet ? ' -q' : ''}`;
        if (output === 'table') assert.equal(out.text(), 'RESULT\nall 2 VMs ready\n', where);
        else assert.equal(out.text(), 'RESULT\n', where);
        assert.equal(
          err.text(),
          output === 'table' ? 'note: old place\n' : 'all 2 VMs ready\nnote: old place\n',
          where,
        );
        assert.equal(o.progressStream, quiet ? null : output === 'table' ? out.out : err.out, where);
        assert.equal(o.progress({}).live, false, `${where}: the captures are no terminals`);
      }
  });
});
