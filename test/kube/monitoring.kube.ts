/**
 * The observability package with the real `promtool` (built from the Go module proxy by
 * harness/build.sh): the alerting rules pass `promtool check rules` and the unit tests of
 * monitoring/alerts.test.yaml (series that make each alert fire, and series that must not), every
 * dashboard query parses as PromQL, the Helm chart's copies are identical to deploy/monitoring,
 * and every metric the rules and the dashboard name is one the controller exports
 * (kubectl.kube.ts checks the same against a running controller's /metrics).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse } from 'yaml';
import { Metrics } from '../../src/observability/metrics.ts';
import { ROOT } from './support.ts';
import { ok } from './tools.ts';

const RULES = join(ROOT, 'deploy/monitoring/prometheus-rules.yaml');
const DASHBOARD = join(ROOT, 'deploy/monitoring/grafana-dashboard.json');
const TESTS = join(ROOT, 'test/kube/monitoring/alerts.test.yaml');

interface Panel {
  title: string;
  type: string;
  targets?: Array<{ expr: string }>;
}

function names(text: string): Set<string> {
  return new Set(
    [...text.matchAll(/(?:provider_proxmox|crossplane_managed_resource)_[a-z_]+/g)].map((m) =>
      m[0].replace(/_(bucket|sum|count)$/, ''),
    ),
  );
}

describe('alerting rules and dashboard with the real promtool', () => {
  it('promtool check rules: the plain rules file and the chart copy', async () => {
    const out = await ok('promtool', ['check', 'rules', RULES]);
    assert.match(out, /SUCCESS: \d+ rules found/);
    assert.equal(
      readFileSync(join(ROOT, 'deploy/helm/provider-proxmox/files/prometheus-rules.yaml'), 'utf8'),
      readFileSync(RULES, 'utf8'),
      'the chart copy is identical (cp deploy/monitoring/prometheus-rules.yaml deploy/helm/provider-proxmox/files/)',
    );
    assert.equal(
      readFileSync(join(ROOT, 'deploy/helm/provider-proxmox/files/grafana-dashboard.json'), 'utf8'),
      readFileSync(DASHBOARD, 'utf8'),
      'the chart copy is identical (cp deploy/monitoring/grafana-dashboard.json deploy/helm/provider-proxmox/files/)',
    );
  });

  it('promtool test rules: every alert fires on its failure and stays quiet on a healthy fleet', async () => {
    const out = await ok('promtool', ['test', 'rules', TESTS]);
    assert.match(out, /SUCCESS/);
    // Every alert of the rules file has at least one case that expects it to fire.
    const alerts = (
      parse(readFileSync(RULES, 'utf8')) as { groups: Array<{ rules: Array<{ alert?: string }> }> }
    ).groups
      .flatMap((g) => g.rules)
      .map((r) => r.alert)
      .filter((a): a is string => Boolean(a));
    const cases = parse(readFileSync(TESTS, 'utf8')) as {
      tests: Array<{ alert_rule_test: Array<{ alertname: string; exp_alerts: unknown[] }> }>;
    };
    const fired = new Set(
      cases.tests.flatMap((t) => t.alert_rule_test.filter((a) => a.exp_alerts.length).map((a) => a.alertname)),
    );
    const quiet = new Set(
      cases.tests.flatMap((t) => t.alert_rule_test.filter((a) => !a.exp_alerts.length).map((a) => a.alertname)),
    );
    assert.deepEqual(
      alerts.filter((a) => !fired.has(a)),
      [],
      'alerts without a firing case',
    );
    assert.deepEqual(
      alerts.filter((a) => !quiet.has(a)),
      [],
      'alerts without a must-not-fire case',
    );
  });

  it('every dashboard query parses as PromQL', async () => {
    const dash = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: Panel[]; uid: string };
    assert.equal(dash.uid, 'provider-proxmox');
    const exprs = dash.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    assert.ok(exprs.length >= 20, `${exprs.length} queries`);
    for (const e of exprs) {
      // Grafana's variables, as Grafana substitutes them.
      const q = e.replaceAll('$__rate_interval', '5m').replaceAll('$job', '.*');
      await ok('promtool', ['--experimental', 'promql', 'format', q]);
    }
  });

  it('every metric the rules and the dashboard use is one the controller exports', async () => {
    const m = new Metrics();
    const exported = new Set((await m.registry.getMetricsAsJSON()).map((x) => x.name));
    const used = new Set([...names(readFileSync(RULES, 'utf8')), ...names(readFileSync(DASHBOARD, 'utf8'))]);
    assert.deepEqual(
      [...used].filter((n) => !exported.has(n)),
      [],
      'names in deploy/monitoring that src/observability/metrics.ts does not export',
    );
  });
});
