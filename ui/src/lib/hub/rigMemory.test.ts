// When the live rig has moved enough for a fit to be planned again.

import { describe, expect, it } from 'vitest';
import type { RigSample } from '../api/types';
import { movedMaterially, rigMemoryOf } from './rigMemory';

const GIB = 1024 ** 3;

/** A rig sample with GPUs of 24 GiB (free as given; null is a lost GPU) and 64 GiB of RAM. */
function sample(gpuFree: (number | null)[], ramAvailable = 40 * GIB): RigSample {
  return {
    at_ms: 0,
    gpus: {
      driver: { state: 'ready', driver_version: null, cuda_driver_version: null },
      gpus: gpuFree.map((free, index) => ({
        index,
        lost: free == null ? 'fell off the bus' : null,
        memory: free == null ? null : { total_bytes: 24 * GIB, used_bytes: 24 * GIB - free, free_bytes: free },
      })),
    },
    host: { memory: { total_bytes: 64 * GIB, used_bytes: 0, available_bytes: ramAvailable, swap_total_bytes: 0, swap_used_bytes: 0 } },
  } as unknown as RigSample;
}

describe('movedMaterially', () => {
  const before = rigMemoryOf(sample([23 * GIB, 23 * GIB]));

  it('ignores the small moves that change no plan', () => {
    expect(movedMaterially(before, rigMemoryOf(sample([23 * GIB - 200 * 1024 ** 2, 23 * GIB])))).toBe(false);
    expect(movedMaterially(before, rigMemoryOf(sample([23 * GIB, 23 * GIB], 41 * GIB)))).toBe(false);
  });

  it('sees a GPU that got busy or freed, and RAM taken', () => {
    expect(movedMaterially(before, rigMemoryOf(sample([15 * GIB, 23 * GIB])))).toBe(true);
    expect(movedMaterially(rigMemoryOf(sample([15 * GIB, 23 * GIB])), before)).toBe(true);
    expect(movedMaterially(before, rigMemoryOf(sample([23 * GIB, 23 * GIB], 30 * GIB)))).toBe(true);
  });

  it('sees a GPU that appeared, disappeared or was lost', () => {
    expect(movedMaterially(before, rigMemoryOf(sample([23 * GIB])))).toBe(true);
    expect(movedMaterially(before, rigMemoryOf(sample([23 * GIB, 23 * GIB, 23 * GIB])))).toBe(true);
    expect(movedMaterially(before, rigMemoryOf(sample([23 * GIB, null])))).toBe(true);
  });
});
