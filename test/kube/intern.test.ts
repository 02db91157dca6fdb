/**
 * The informer cache's string interning (src/engine/intern.ts internStrings, applied by the
 * informer): the cached objects keep exactly the values the apiserver sent, and the many copies
 * JSON.parse makes of a value repeated across objects become one. No API server: objects are
 * parsed here.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { internStrings } from '../../src/engine/intern.ts';
import type { KubeApi } from '../../src/kube/api.ts';
import { Informer, type KubeObject } from '../../src/kube/informer.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const vm = (i: number) =>
  JSON.stringify({
    apiVersion: 'proxmox.sankofa.io/v1alpha1',
    kind: 'ProxmoxVM',
    metadata: {
      name: `obs-${i}`,
      namespace: 'scale',
      resourceVersion: String(1000 + i),
      annotations: { 'crossplane.io/external-name': String(10_000 + i) },
      managedFields: [{ manager: 'kubectl', operation: 'Update' }],
    },
    spec: { managementPolicies: ['Observe'], forProvider: { site: 'site-a', cpu: 1, agent: false, tags: null } },
    status: {
      conditions: [{ type: 'Synced', status: 'True', reason: 'ReconcileSuccess', message: 'x'.repeat(300) }],
      atProvider: { vmId: 10_000 + i, state: 'running' },
    },
  });

describe('internStrings', () => {
  it('keeps every value as it was, at any depth, in arrays, with numbers, booleans and nulls', () => {
    for (let i = 0; i < 3; i++) {
      const text = vm(i);
      assert.deepEqual(internStrings(JSON.parse(text)), JSON.parse(text));
      assert.equal(JSON.stringify(internStrings(JSON.parse(text))), text, 'key order too');
    }
    assert.equal(internStrings('12345'), '12345', 'an array-index-like string');
    assert.equal(internStrings(''), '');
    assert.deepEqual(internStrings(JSON.parse('{"__proto__":"x","a":["__proto__",1,null]}')), {
      ['__proto__']: 'x',
      a: ['__proto__', 1, null],
    });
    assert.equal(Object.getPrototypeOf(internStrings(JSON.parse('{"__proto__":"x"}'))), Object.prototype);
  });

  it('makes the copies of a repeated value one', () => {
    // 20,000 copies of a 200-character value: 4 MB as JSON.parse leaves them, one copy interned.
    const value = `repeated-${'v'.repeat(190)}`;
    const text = JSON.stringify({ a: value, b: [value] });
    const heapOf = (intern: boolean) => {
      gc();
      const before = process.memoryUsage().heapUsed;
      const kept = Array.from({ length: 10_000 }, () => (intern ? internStrings(JSON.parse(text)) : JSON.parse(text)));
      gc();
      const used = process.memoryUsage().heapUsed - before;
      assert.equal(kept.length, 10_000);
      return used;
    };
    const plain = heapOf(false);
    const interned = heapOf(true);
    assert.ok(plain > 4_000_000, `plain: ${plain}`);
    assert.ok(interned < plain / 2, `interned ${interned} vs plain ${plain}`);
  });
});

describe('Informer.trim', () => {
  it('drops managedFields and keeps the rest as sent', () => {
    const inf = new Informer<KubeObject>({} as KubeApi, '/apis/proxmox.sankofa.io/v1alpha1/proxmoxvms');
    const sent = JSON.parse(vm(7));
    const kept = inf.trim(JSON.parse(vm(7)));
    delete sent.metadata.managedFields;
    assert.deepEqual(kept, sent);
  });
});
