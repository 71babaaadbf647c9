// The run charts' columns: tok/s against the load, depth and prompt length, a pair of lines per
// group of steps sharing the other coordinates, aligned on a sorted x; latency percentiles per
// step; the compare overlay against concurrency.

import { describe, expect, it } from 'vitest';
import { digest, point, stats, step, stepSummary, summary } from '../../test/bench';
import { axisTitle, compareAgainstConcurrency, latencyPerStep, stepLabels, throughputAgainst } from './series';

const c = (n: number) => ({ concurrency: n });

describe('throughputAgainst', () => {
  it('draws the classic streams sweep: aggregate and per stream against concurrency', () => {
    const steps = [
      digest(point(256, 512, 0, c(4)), { aggregate_tps: 140, stream_tps: 35 }),
      digest(point(256, 512, 0, c(1)), { aggregate_tps: 42, stream_tps: 42 }),
      digest(point(256, 512, 0, c(2)), { aggregate_tps: 78, stream_tps: 39 }),
    ];
    const d = throughputAgainst(steps, 'load');
    expect(d?.x).toEqual([1, 2, 4]);
    expect(d?.series.map((s) => [s.label, s.values, s.dashed ?? false])).toEqual([
      ['aggregate', [42, 78, 140], false],
      ['per stream', [42, 39, 35], true],
    ]);
    expect(axisTitle('load', steps)).toBe('Streams');
  });

  it('gives each group its own pair of lines, null where a group has no point', () => {
    const steps = [
      digest(point(256, 512, 0, c(1)), { aggregate_tps: 42 }),
      digest(point(256, 512, 0, c(8)), { aggregate_tps: 200 }),
      digest(point(8192, 512, 0, c(1)), { aggregate_tps: 30 }),
    ];
    const d = throughputAgainst(steps, 'load');
    expect(d?.series.map((s) => s.label)).toEqual(['256:512 · aggregate', '256:512 · per stream', '8192:512 · aggregate', '8192:512 · per stream']);
    expect(d?.series[2]!.values).toEqual([30, null]);
    expect(d?.series[0]!.color).toBe(d?.series[1]!.color);
    expect(d?.series[0]!.color).not.toBe(d?.series[2]!.color);
  });

  it('draws against depth and prompt length, and nothing with a single value', () => {
    const steps = [
      digest(point(2048, 512, 0, c(1)), { aggregate_tps: 40 }),
      digest(point(2048, 512, 32768, c(1)), { aggregate_tps: 31 }),
      digest(point(2048, 512, 131072, c(1)), { aggregate_tps: 19 }),
    ];
    expect(throughputAgainst(steps, 'depth')?.x).toEqual([0, 32768, 131072]);
    expect(throughputAgainst(steps, 'depth')?.series[0]!.values).toEqual([40, 31, 19]);
    expect(throughputAgainst(steps, 'load')).toBeNull();
    expect(throughputAgainst(steps, 'prompt')).toBeNull();
    const prompts = [digest(point(256, 512)), digest(point(8192, 512))];
    expect(throughputAgainst(prompts, 'prompt')?.series[0]!.label).toBe('aggregate');
    expect(axisTitle('load', [digest(point(1, 1, 0, { rate: 2 }))])).toBe('Requests per second');
  });
});

describe('latencyPerStep', () => {
  it('gives median, p90 and p99 per step, numbered from 1', () => {
    const results = [
      step(0, point(256, 512), 30, [40], { summary: stepSummary({ ttft_ms: stats([100, 200, 300]) }) }),
      step(1, point(256, 512, 0, c(8)), 30, [], { summary: null }),
    ];
    const d = latencyPerStep(results, 'ttft_ms', '#d29922');
    expect(d.x).toEqual([1, 2]);
    expect(d.series.map((s) => [s.label, s.values])).toEqual([
      ['median', [200, null]],
      ['p90', [280, null]],
      ['p99', [298, null]],
    ]);
    expect(stepLabels(results).get(2)).toBe('256:512, 8 streams');
  });
});

describe('compareAgainstConcurrency', () => {
  it('draws each run’s lines on the union of their concurrencies, leaving rate steps out', () => {
    const a = summary(1, { name: 'llama', steps: [digest(point(256, 512, 0, c(1)), { aggregate_tps: 40 }), digest(point(256, 512, 0, c(4)), { aggregate_tps: 120 })] });
    const b = summary(2, { name: 'vllm', steps: [digest(point(256, 512, 0, c(1)), { aggregate_tps: 45 }), digest(point(256, 512, 0, c(8)), { aggregate_tps: 300 }), digest(point(256, 512, 0, { rate: 2 }))] });
    const d = compareAgainstConcurrency([a, b]);
    expect(d?.x).toEqual([1, 4, 8]);
    expect(d?.series.map((s) => [s.label, s.values])).toEqual([
      ['#1 llama · aggregate', [40, 120, null]],
      ['#1 llama · per stream', [40, 40, null]],
      ['#2 vllm · aggregate', [45, null, 300]],
      ['#2 vllm · per stream', [40, null, 40]],
    ]);
    expect(compareAgainstConcurrency([summary(3, { steps: [digest(point(1, 1, 0, { rate: 1 }))] })])).toBeNull();
  });
});
