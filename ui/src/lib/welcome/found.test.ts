import { describe, expect, it } from 'vitest';
import type { EngineBuild, RigSample } from '../api/types';
import { buildUnderWay, foundGpus, gpusWithoutCudaBuild, opensOnWelcome, readyEngines } from './found';
import { emptyBuild } from '../engines/instances';

function sample(gpus: Array<{ width: number; max: number }>): RigSample {
  return {
    at_ms: 0,
    gpus: {
      driver: { state: 'ready', driver_version: '570', cuda_driver_version: 12080 },
      gpus: gpus.map((g, index) => ({
        index,
        name: 'RTX 3090',
        memory: { total_bytes: 24 * 2 ** 30, used_bytes: 0, free_bytes: 24 * 2 ** 30 },
        pcie: { gen_current: 4, gen_max: 4, width_current: g.width, width_max: g.max, tx_bytes_per_s: null, rx_bytes_per_s: null },
      })),
    },
    host: {},
  } as unknown as RigSample;
}

describe('first-run findings', () => {
  it('names each GPU with its link, the maximum shown only when it runs below', () => {
    const found = foundGpus(sample([{ width: 16, max: 16 }, { width: 1, max: 16 }]));
    expect(found[0]?.link).toBe('PCIe 4.0 x16');
    expect(found[0]?.degraded).toBe(false);
    expect(found[1]?.link).toBe('PCIe 4.0 x1 (of 4.0 x16)');
    expect(found[1]?.degraded).toBe(true);
    expect(foundGpus(null)).toEqual([]);
  });

  it('lists ready llama.cpp builds and a build under way', () => {
    const builds = [
      { id: 1, kind: 'llama.cpp', version: '0c1e570', backend: 'cpu', cuda_architectures: null, created_at_ms: 1 },
      { id: 2, kind: 'vllm', version: '0.11', backend: 'cuda', cuda_architectures: null, created_at_ms: 2 },
    ] as unknown as EngineBuild[];
    expect(readyEngines(builds)).toEqual(['llama.cpp 0c1e570 · CPU']);
    expect(buildUnderWay(emptyBuild())).toBeNull();
    expect(buildUnderWay({ ...emptyBuild(), buildId: 3, step: 'compiling', fraction: 0.42 })).toBe('building llama.cpp: compiling 42 %');
  });

  it('says when the GPUs have no CUDA build to use them', () => {
    const gpus = foundGpus(sample([{ width: 16, max: 16 }]));
    const cpu = [{ kind: 'llama.cpp', backend: 'cpu', status: 'ready' }] as unknown as EngineBuild[];
    const cuda = [{ kind: 'llama.cpp', backend: 'cuda', status: 'ready' }] as unknown as EngineBuild[];
    expect(gpusWithoutCudaBuild(gpus, cpu)).toBe(true);
    expect(gpusWithoutCudaBuild(gpus, cuda)).toBe(false);
    expect(gpusWithoutCudaBuild([], cpu)).toBe(false);
    expect(gpusWithoutCudaBuild(gpus, null)).toBe(false);
  });

  it('opens on the first-run page only with no profile and not skipped', () => {
    expect(opensOnWelcome([], false)).toBe(true);
    expect(opensOnWelcome([], true)).toBe(false);
    expect(opensOnWelcome(null, false)).toBe(false);
    expect(opensOnWelcome([{} as never], false)).toBe(false);
  });
});
