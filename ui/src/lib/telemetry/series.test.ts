// The live point buffer: append, trim to the window, per-GPU separation, vanished GPUs, gaps.

import { describe, expect, it } from 'vitest';
import { frame, gpu } from '../../test/frames';
import { appendFrame, BUFFER_WINDOW_MS, emptyBuffer, firstIndexAtOrAfter, gpuKey, vanishedGpus, windowColumns } from './series';

const T0 = 1_763_700_000_000;
const GIB = 1024 ** 3;

function feed(frames: ReturnType<typeof frame>[], gapMs = 5_000) {
  return frames.reduce((b, f) => appendFrame(b, f, { gapMs }), emptyBuffer());
}

describe('appendFrame', () => {
  it('appends one point per GPU and for the host', () => {
    const b = feed([frame(T0, [gpu(0)]), frame(T0 + 1000, [gpu(0, { utilization_gpu_pct: 10 })])]);
    const s = b.gpus.get(gpuKey(gpu(0)))!;
    expect(s.t).toEqual([T0, T0 + 1000]);
    expect(s.utilization).toEqual([87, 10]);
    expect(s.vramUsed).toEqual([20 * GIB, 20 * GIB]);
    expect(s.temperature).toEqual([65_000, 65_000]);
    expect(s.power).toEqual([300_000, 300_000]);
    expect(s.vramTotal).toBe(24 * GIB);
    expect(b.host.t).toEqual([T0, T0 + 1000]);
    expect(b.host.cpu).toEqual([12.5, 12.5]);
    expect(b.lastAt).toBe(T0 + 1000);
  });

  it('does not change the buffer it was given', () => {
    const b1 = feed([frame(T0, [gpu(0)])]);
    const before = b1.gpus.get(gpuKey(gpu(0)))!.t.slice();
    appendFrame(b1, frame(T0 + 1000, [gpu(0)]));
    expect(b1.gpus.get(gpuKey(gpu(0)))!.t).toEqual(before);
  });

  it('keeps GPUs apart by UUID, even when their indexes swap', () => {
    const a = gpu(0, { uuid: 'GPU-a', utilization_gpu_pct: 1 });
    const c = gpu(1, { uuid: 'GPU-c', utilization_gpu_pct: 99 });
    const b = feed([frame(T0, [a, c]), frame(T0 + 1000, [{ ...c, index: 0 }, { ...a, index: 1 }])]);
    expect(b.gpus.get('GPU-a')!.utilization).toEqual([1, 1]);
    expect(b.gpus.get('GPU-c')!.utilization).toEqual([99, 99]);
    expect(b.gpus.get('GPU-c')!.index).toBe(0);
  });

  it('falls back to the index for a GPU without a UUID', () => {
    expect(gpuKey(gpu(3, { uuid: null }))).toBe('index:3');
  });

  it('trims points older than the window, measured from the newest frame', () => {
    const frames = [0, 1, 2, 3, 4, 5].map((i) => frame(T0 + i * 60_000, [gpu(0)]));
    const b = frames.reduce((acc, f) => appendFrame(acc, f, { windowMs: 2.5 * 60_000, gapMs: 120_000 }), emptyBuffer());
    expect(b.gpus.get(gpuKey(gpu(0)))!.t).toEqual([T0 + 3 * 60_000, T0 + 4 * 60_000, T0 + 5 * 60_000]);
    expect(b.host.t).toHaveLength(3);
  });

  it('keeps 15 minutes by default', () => {
    const frames = Array.from({ length: 20 }, (_, i) => frame(T0 + i * 60_000, [gpu(0)]));
    const b = frames.reduce((acc, f) => appendFrame(acc, f, { gapMs: 120_000 }), emptyBuffer());
    const t = b.gpus.get(gpuKey(gpu(0)))!.t;
    expect(t[0]).toBe(T0 + 19 * 60_000 - BUFFER_WINDOW_MS);
    expect(t).toHaveLength(16);
  });

  it('ignores a frame that is not newer than the last one (the repeat after a reconnect)', () => {
    const b1 = feed([frame(T0, [gpu(0)]), frame(T0 + 1000, [gpu(0)])]);
    const b2 = appendFrame(b1, frame(T0 + 1000, [gpu(0)]));
    expect(b2).toBe(b1);
    expect(appendFrame(b1, frame(T0, [gpu(0)]))).toBe(b1);
  });

  it('inserts a null point across a gap so the chart breaks the line', () => {
    const b = feed([frame(T0, [gpu(0)]), frame(T0 + 60_000, [gpu(0)])], 5_000);
    const s = b.gpus.get(gpuKey(gpu(0)))!;
    expect(s.t).toEqual([T0, T0 + 1, T0 + 60_000]);
    expect(s.utilization).toEqual([87, null, 87]);
    expect(b.host.cpu).toEqual([12.5, null, 12.5]);
  });

  it('records a lost GPU as nulls', () => {
    const lost = gpu(0, {
      lost: 'GPU is lost (NVML_ERROR_GPU_IS_LOST)',
      memory: null, utilization_gpu_pct: null, temperature_mc: null, power_mw: null,
    });
    const b = feed([frame(T0, [gpu(0)]), frame(T0 + 1000, [lost])]);
    const s = b.gpus.get(gpuKey(gpu(0)))!;
    expect(s.utilization).toEqual([87, null]);
    expect(s.vramUsed).toEqual([20 * GIB, null]);
    expect(s.vramTotal).toBe(24 * GIB);
  });
});

describe('a GPU that disappears', () => {
  const g0 = gpu(0);
  const g1 = gpu(1);

  it('stops getting points but keeps its history and is reported as vanished', () => {
    const b = feed([frame(T0, [g0, g1]), frame(T0 + 1000, [g0, g1]), frame(T0 + 2000, [g0])]);
    expect(b.gpus.get(gpuKey(g1))!.t).toEqual([T0, T0 + 1000]);
    expect(b.gpus.get(gpuKey(g0))!.t).toHaveLength(3);
    const gone = vanishedGpus(b, frame(T0 + 2000, [g0]));
    expect(gone).toEqual([{ key: gpuKey(g1), index: 1, name: g1.name, lastSeenMs: T0 + 1000 }]);
  });

  it('is forgotten once its last point leaves the window', () => {
    const opts = { windowMs: 10_000, gapMs: 5_000 };
    let b = appendFrame(emptyBuffer(), frame(T0, [g0, g1]), opts);
    b = appendFrame(b, frame(T0 + 9_000, [g0]), opts);
    expect(b.gpus.has(gpuKey(g1))).toBe(true);
    b = appendFrame(b, frame(T0 + 10_001, [g0]), opts);
    expect(b.gpus.has(gpuKey(g1))).toBe(false);
    expect(vanishedGpus(b, frame(T0 + 10_001, [g0]))).toEqual([]);
  });

  it('gets a gap, not a joined line, when it comes back', () => {
    const b = feed([frame(T0, [g0, g1]), frame(T0 + 1000, [g0]), frame(T0 + 30_000, [g0, g1])], 5_000);
    const s = b.gpus.get(gpuKey(g1))!;
    expect(s.t).toEqual([T0, T0 + 1, T0 + 30_000]);
    expect(s.utilization).toEqual([87, null, 87]);
  });
});

describe('windows', () => {
  it('finds the first index at or after a cutoff', () => {
    expect(firstIndexAtOrAfter([1, 2, 3, 4], 3)).toBe(2);
    expect(firstIndexAtOrAfter([1, 2, 3, 4], 2.5)).toBe(2);
    expect(firstIndexAtOrAfter([1, 2, 3, 4], 0)).toBe(0);
    expect(firstIndexAtOrAfter([1, 2, 3, 4], 9)).toBe(4);
    expect(firstIndexAtOrAfter([], 9)).toBe(0);
  });
  it('slices time and value columns together', () => {
    expect(windowColumns([10, 20, 30, 40], [[1, 2, 3, null]], 15, 40)).toEqual([[30, 40], [3, null]]);
  });
});
