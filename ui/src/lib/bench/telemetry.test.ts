// The GPUs during a run: a line per GPU per metric over seconds, a clock that fell while busy, and
// live frames extending the stored points.

import { describe, expect, it } from 'vitest';
import { telemetryPoint } from '../../test/bench';
import { frame, gpu } from '../../test/frames';
import { clockDropped, framePoint, telemetryGpus, telemetrySeries, withLivePoints } from './telemetry';

describe('telemetrySeries', () => {
  it('gives a line per GPU over seconds, null where a GPU did not report', () => {
    const points = [
      telemetryPoint(2000, [{ index: 0, util: 90 }, { index: 1, util: 80 }]),
      telemetryPoint(1000, [{ index: 0, util: 50 }]),
    ];
    const d = telemetrySeries(points, 'util_pct');
    expect(d?.x).toEqual([1, 2]);
    expect(d?.series.map((s) => [s.label, s.values])).toEqual([
      ['GPU 0 · NVIDIA GeForce RTX 3090', [50, 90]],
      ['GPU 1 · NVIDIA GeForce RTX 3090', [null, 80]],
    ]);
    expect(telemetryGpus(points).map((g) => g.index)).toEqual([0, 1]);
  });
  it('has nothing to draw when no GPU reported the metric', () => {
    expect(telemetrySeries([telemetryPoint(0, [{ index: 0, util: 50 }])], 'power_w')).toBeNull();
    expect(telemetrySeries([], 'util_pct')).toBeNull();
  });
});

describe('clockDropped', () => {
  it('calls out a GPU whose clock fell well below its peak while busy', () => {
    const points = [
      telemetryPoint(0, [{ index: 0, util: 99, clock: 1950 }, { index: 1, util: 99, clock: 1900 }]),
      telemetryPoint(1000, [{ index: 0, util: 99, clock: 1400 }, { index: 1, util: 99, clock: 1850 }]),
      // Idle and slow is not throttling.
      telemetryPoint(2000, [{ index: 1, util: 0, clock: 300 }]),
    ];
    expect(clockDropped(points)).toEqual([{ index: 0, min: 1400, max: 1950 }]);
  });
});

describe('live frames', () => {
  it('become points after the run started, extending the stored ones', () => {
    const f = frame(1_000_005_000, [gpu(0)]);
    const p = framePoint(f, 1_000_000_000);
    expect(p.t_ms).toBe(5000);
    expect(p.gpus?.[0]).toMatchObject({ index: 0, util_pct: f.sample.gpus.gpus[0]!.utilization_gpu_pct });
    expect(p.gpus?.[0]!.temp_c).toBe((f.sample.gpus.gpus[0]!.temperature_mc ?? 0) / 1000);
    const stored = [telemetryPoint(3000, []), telemetryPoint(4000, [])];
    const live = [telemetryPoint(3500, []), telemetryPoint(5000, [])];
    expect(withLivePoints(stored, live).map((x) => x.t_ms)).toEqual([3000, 4000, 5000]);
  });
});
