// Devices in the placement editor: a stable string key per device (`gpu-0`, `cpu`) for columns,
// drag-and-drop and data attributes, and the names llama.cpp uses (`CUDA0`, `CPU`).

import type { DeviceId, DeviceSpec } from '../api/types';

/** `gpu-<index>` or `cpu`. */
export type DeviceKey = string;

export const CPU: DeviceKey = 'cpu';

export function deviceKey(id: DeviceId): DeviceKey {
  return id.kind === 'gpu' ? `gpu-${id.index}` : CPU;
}

export function gpuKey(index: number): DeviceKey {
  return `gpu-${index}`;
}

export function parseDeviceKey(key: DeviceKey): DeviceId | null {
  if (key === CPU) return { kind: 'cpu' };
  const m = /^gpu-(\d+)$/.exec(key);
  return m ? { kind: 'gpu', index: Number(m[1]) } : null;
}

/** The GPU index of a key, or null for the CPU. */
export function gpuIndex(key: DeviceKey): number | null {
  const id = parseDeviceKey(key);
  return id?.kind === 'gpu' ? id.index : null;
}

/** The buffer name llama.cpp prints and `-ot` takes. */
export function bufferName(id: DeviceId): string {
  return id.kind === 'gpu' ? `CUDA${id.index}` : 'CPU';
}

export function sameDevice(a: DeviceId, b: DeviceId): boolean {
  return a.kind === b.kind && (a.kind === 'cpu' || (b.kind === 'gpu' && a.index === b.index));
}

/** "GPU 0" or "CPU": the short label of a column and of the move menu. */
export function shortLabel(key: DeviceKey): string {
  const i = gpuIndex(key);
  return i == null ? 'CPU' : `GPU ${i}`;
}

/** The model part of a device name, without the vendor's brand words:
 *  "GPU 0 · NVIDIA GeForce RTX 3090 Ti" → "RTX 3090 Ti", "CPU RAM · Ryzen 9 9900X" → "Ryzen 9 9900X". */
export function modelName(spec: DeviceSpec): string {
  const i = spec.name.indexOf(' · ');
  const name = i >= 0 ? spec.name.slice(i + 3) : spec.name;
  return name.replace(/^NVIDIA (GeForce )?/, '') || name;
}
