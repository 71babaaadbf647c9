// The live rig's free memory as a fit depends on it, and when it has moved enough to plan again:
// a GPU came or went (or was lost), or a device's free memory moved by more than 2 % of its total
// (about 490 MiB on a 24 GiB card, 1.3 GiB of 64 GiB RAM): an engine starting or stopping, a
// program taking a card. Smaller moves (a desktop's few MiB, the page cache) change no plan.

import type { RigSample } from '../api/types';

/** A move of more than this share of a device's total memory is material. */
export const MATERIAL_SHARE = 0.02;

interface DeviceMemory {
  free: number;
  total: number;
}

/** Free and total memory per device: `gpu-<index>` for each GPU that answers, `ram` for the host. */
export type RigMemory = Record<string, DeviceMemory>;

export function rigMemoryOf(sample: RigSample): RigMemory {
  const memory: RigMemory = {};
  for (const g of sample.gpus.gpus) {
    if (g.lost == null && g.memory) memory[`gpu-${g.index}`] = { free: g.memory.free_bytes, total: g.memory.total_bytes };
  }
  memory.ram = { free: sample.host.memory.available_bytes, total: sample.host.memory.total_bytes };
  return memory;
}

/** True when a plan made on `before` may differ on `now`. */
export function movedMaterially(before: RigMemory, now: RigMemory): boolean {
  const keys = Object.keys(now);
  if (keys.length !== Object.keys(before).length) return true;
  return keys.some((key) => {
    const a = before[key];
    const b = now[key]!;
    return !a || Math.abs(a.free - b.free) > MATERIAL_SHARE * Math.max(a.total, b.total);
  });
}
