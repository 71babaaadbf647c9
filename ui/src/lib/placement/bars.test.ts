// Device bars: GiB figures, overflow, the capacity mark.

import { describe, expect, it } from 'vitest';
import { cpuSpec, devicePlan, gpuSpec, GIB, MIB } from '../../test/plans';
import { barSummary, deviceBar, formatGiB, gib, plannedRamReserve } from './bars';

describe('gib', () => {
  it('writes binary gigabytes with one decimal', () => {
    expect(gib(24 * GIB)).toBe('24.0');
    expect(formatGiB(22_167_266_304)).toBe('20.6 GiB');
    expect(formatGiB(512 * MIB, 2)).toBe('0.50 GiB');
    expect(gib(-1)).toBe('0.0');
    expect(gib(Number.NaN)).toBe('—');
  });
});

describe('deviceBar', () => {
  it('stacks the four parts against capacity minus reserve', () => {
    // The GPU 0 column of the automatic GLM-5.2 plan on 4× RTX 3090.
    const d = devicePlan(gpuSpec(0), {
      weights_bytes: 22_167_266_304,
      kv_bytes: 1_245_708_288,
      compute_bytes: 125_829_120,
      overhead_bytes: 419_430_400,
    });
    const bar = deviceBar(d);
    expect(bar.usable).toBe(24 * GIB - 512 * MIB);
    expect(bar.used).toBe(22_167_266_304 + 1_245_708_288 + 125_829_120 + 419_430_400);
    expect(bar.overflow).toBe(0);
    expect(bar.capacityPct).toBe(100);
    expect(bar.segments.map((s) => s.kind)).toEqual(['weights', 'kv', 'compute', 'overhead']);
    expect(bar.segments.reduce((a, s) => a + s.pct, 0)).toBeCloseTo((bar.used / bar.usable) * 100, 6);
    expect(barSummary(bar)).toBe('22.3 / 23.5 GiB');
    expect(gib(bar.free)).toBe('1.2');
  });

  it('goes past the capacity mark with the overflow amount when over', () => {
    // The seed's -ncmoe plan: 48.1 GiB asked of a 24 GiB card.
    const used = 48.1 * GIB;
    const usable = 24 * GIB - 512 * MIB;
    const d = devicePlan(gpuSpec(3), { weights_bytes: used - 400 * MIB }, used - usable);
    const bar = deviceBar(d);
    expect(bar.scale).toBeCloseTo(used, 0);
    expect(bar.capacityPct).toBeCloseTo((usable / used) * 100, 6);
    expect(bar.usedPct).toBeGreaterThan(200);
    expect(bar.free).toBe(0);
    expect(barSummary(bar)).toBe('48.1 / 23.5 GiB · over by 24.6 GiB');
  });

  it('handles an empty CPU column and a device with no usable room', () => {
    expect(deviceBar(devicePlan(cpuSpec())).used).toBe(0);
    const none = deviceBar(devicePlan(gpuSpec(0, { capacity_bytes: 256 * MIB })));
    expect(none.usable).toBe(0);
    expect(none.usedPct).toBe(Infinity);
    expect(none.capacityPct).toBe(0);
  });
});

describe('device names', () => {
  it('drop the vendor brand words in the column header', async () => {
    const { modelName, deviceKey, parseDeviceKey, bufferName } = await import('./devices');
    expect(modelName(gpuSpec(0, { name: 'GPU 0 · NVIDIA GeForce RTX 3090 Ti' }))).toBe('RTX 3090 Ti');
    expect(modelName(gpuSpec(1, { name: 'GPU 1 · NVIDIA H100 80GB HBM3' }))).toBe('H100 80GB HBM3');
    expect(modelName(cpuSpec())).toBe('Ryzen 9 9900X');
    expect(deviceKey({ kind: 'gpu', index: 3 })).toBe('gpu-3');
    expect(parseDeviceKey('gpu-3')).toEqual({ kind: 'gpu', index: 3 });
    expect(parseDeviceKey('cpu')).toEqual({ kind: 'cpu' });
    expect(parseDeviceKey('npu-1')).toBeNull();
    expect(bufferName({ kind: 'gpu', index: 2 })).toBe('CUDA2');
  });
});

describe('plannedRamReserve', () => {
  it('names the RAM reserve the planner used when it is not the margin asked for', () => {
    // 21.9 GiB available: the planner keeps a quarter of it, not the 8 GiB asked.
    const ram = cpuSpec({ capacity_bytes: 21.9 * GIB, reserve_bytes: (21.9 * GIB) / 4 });
    expect(plannedRamReserve([gpuSpec(0), ram], 8 * GIB)).toBe('5.5 GiB kept: at most a quarter of the available 21.9 GiB');
  });

  it('says nothing when the planner kept what was asked, or there is no CPU device', () => {
    expect(plannedRamReserve([cpuSpec()], 8 * GIB)).toBeNull();
    expect(plannedRamReserve([gpuSpec(0)], 8 * GIB)).toBeNull();
  });
});
