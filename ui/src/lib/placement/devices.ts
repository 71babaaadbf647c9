// Devices in the placement editor: a stable string key per device (`gpu-0`, `rpc-0`, `cpu`) for
// columns, drag-and-drop and data attributes, and the names llama.cpp uses (`CUDA0`, `RPC0`, `CPU`).

import type { DeviceId, DeviceSpec } from '../api/types';

/** `gpu-<index>`, `rpc-<index>` (a device lent by another box) or `cpu`. */
export type DeviceKey = string;

export const CPU: DeviceKey = 'cpu';

export function deviceKey(id: DeviceId): DeviceKey {
  return id.kind === 'cpu' ? CPU : `${id.kind}-${id.index}`;
}

export function gpuKey(index: number): DeviceKey {
  return `gpu-${index}`;
}

export function parseDeviceKey(key: DeviceKey): DeviceId | null {
  if (key === CPU) return { kind: 'cpu' };
  const m = /^(gpu|rpc)-(\d+)$/.exec(key);
  if (!m) return null;
  return m[1] === 'gpu' ? { kind: 'gpu', index: Number(m[2]) } : { kind: 'rpc', index: Number(m[2]) };
}

/** A device another box lends. */
export function isLentKey(key: DeviceKey): boolean {
  return parseDeviceKey(key)?.kind === 'rpc';
}

/** The GPU index of a key, or null for the CPU. */
export function gpuIndex(key: DeviceKey): number | null {
  const id = parseDeviceKey(key);
  return id?.kind === 'gpu' ? id.index : null;
}

/** The buffer name llama.cpp prints and `-ot` takes (a lent device's also names its server:
 *  `RPC0[host:port]`, which the daemon writes). */
export function bufferName(id: DeviceId): string {
  if (id.kind === 'cpu') return 'CPU';
  return id.kind === 'gpu' ? `CUDA${id.index}` : `RPC${id.index}`;
}

export function sameDevice(a: DeviceId, b: DeviceId): boolean {
  if (a.kind === 'cpu' || b.kind === 'cpu') return a.kind === b.kind;
  return a.kind === b.kind && a.index === b.index;
}

/** "GPU 0", "RPC 0" or "CPU": the short label of a column and of the move menu. */
export function shortLabel(key: DeviceKey): string {
  const id = parseDeviceKey(key);
  if (!id || id.kind === 'cpu') return 'CPU';
  return id.kind === 'gpu' ? `GPU ${id.index}` : `RPC ${id.index}`;
}

/** The model part of a device name, without the vendor's brand words:
 *  "GPU 0 · NVIDIA GeForce RTX 3090 Ti" → "RTX 3090 Ti", "CPU RAM · Ryzen 9 9900X" → "Ryzen 9 9900X". */
export function modelName(spec: DeviceSpec): string {
  const i = spec.name.indexOf(' · ');
  const name = i >= 0 ? spec.name.slice(i + 3) : spec.name;
  return name.replace(/^NVIDIA (GeForce )?/, '') || name;
}
