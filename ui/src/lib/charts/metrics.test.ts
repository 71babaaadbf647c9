// Chart columns: unit conversion, windows, nulls as gaps; history labels.

import { describe, expect, it } from 'vitest';
import type { GpuHistory, History } from '../api/types';
import { frame, gpu } from '../../test/frames';
import { appendFrame, emptyBuffer, gpuKey } from '../telemetry/series';
import { historyEnd, sourceLabel } from '../telemetry/history';
import { historyGpuColumns, lastValue, liveGpuColumns, METRICS } from './metrics';

const GIB = 1024 ** 3;

describe('chart columns', () => {
  it('converts live VRAM to GiB, temperature to °C and power to W, within the window', () => {
    let b = emptyBuffer();
    for (let i = 0; i < 10; i++) b = appendFrame(b, frame(1000 * i, [gpu(0)]));
    const s = b.gpus.get(gpuKey(gpu(0)))!;
    const vram = liveGpuColumns(s, 'vram', 3000, 9000);
    expect(vram[0]).toEqual([6000, 7000, 8000, 9000]);
    expect(vram[1]).toEqual([20, 20, 20, 20]);
    expect(liveGpuColumns(s, 'temperature', 0, 9000)).toEqual([[9000], [65]]);
    expect(liveGpuColumns(s, 'power', 0, 9000)).toEqual([[9000], [300]]);
  });

  it('keeps nulls in history as gaps', () => {
    const h: GpuHistory = {
      uuid: 'GPU-a', index: 0, name: 'x', t: [1, 2, 3],
      utilization_gpu_pct: [10, null, 30], memory_used_bytes: [GIB, null, 2 * GIB], memory_total_bytes: 24 * GIB,
      temperature_mc: [50_000, null, 51_000], power_mw: [null, null, 100_000],
    };
    expect(historyGpuColumns(h, 'utilization')).toEqual([[1, 2, 3], [10, null, 30]]);
    expect(historyGpuColumns(h, 'vram')).toEqual([[1, 2, 3], [1, null, 2]]);
    expect(historyGpuColumns(h, 'power')).toEqual([[1, 2, 3], [null, null, 100]]);
  });

  it('fixes the VRAM axis to the card size and utilization to 100', () => {
    expect(METRICS.vram.yMax({ total: 24 * GIB })).toEqual({ max: 24, fixed: true });
    expect(METRICS.utilization.yMax({ total: null })).toEqual({ max: 100, fixed: true });
  });

  it('finds the last real value', () => {
    expect(lastValue([1, 2, null])).toBe(2);
    expect(lastValue([null])).toBeNull();
    expect(lastValue(undefined)).toBeNull();
  });
});

describe('history labels', () => {
  it('names the source', () => {
    expect(sourceLabel({ source: 'memory', step_ms: 1000 })).toBe('from memory');
    expect(sourceLabel({ source: 'database', step_ms: 10_000 })).toBe('10 s averages from the database');
  });
  it('ends the charts at the newest point, or now when empty', () => {
    const h: History = {
      range: '1h', step_ms: 10_000, source: 'database',
      gpus: [{ uuid: 'a', index: 0, name: null, t: [5, 50], utilization_gpu_pct: [], memory_used_bytes: [], memory_total_bytes: null, temperature_mc: [], power_mw: [] }],
      host: { t: [7, 40], cpu_usage_pct: [], memory_used_bytes: [] },
    };
    expect(historyEnd(h, 999)).toBe(50);
    expect(historyEnd({ ...h, gpus: [], host: { t: [], cpu_usage_pct: [], memory_used_bytes: [] } }, 999)).toBe(999);
  });
});
