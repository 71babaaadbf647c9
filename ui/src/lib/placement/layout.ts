// The editor's picture of a plan: which column each layer block and each expert block sits in,
// read from the daemon's answer. A layer's "home" is its -ngl/-ts device (where llama.cpp keeps
// its KV cache); its weights are elsewhere only when a per-layer `-ot` moved them.

import type { Plan, PlacementOptions, PlanResponse } from '../api/types';
import { deviceKey, type DeviceKey, CPU } from './devices';
import { compileOverrides, layerWeightsDevice, type Layout, type PlacementContext } from './simulate';

export interface PlacedLayout extends Layout {
  /** The layer's -ngl/-ts device. */
  home: DeviceKey[];
  /** Where the layer's KV cache is (the daemon's `kv_devices`). */
  kv: DeviceKey[];
}

export type BlockKind = 'layer' | 'experts';

export interface BlockRef {
  kind: BlockKind;
  layer: number;
}

export interface Move extends BlockRef {
  to: DeviceKey;
}

/** A block's stable id: `L12` (the layer) or `E12` (its experts). */
export function blockId(b: BlockRef): string {
  return `${b.kind === 'layer' ? 'L' : 'E'}${b.layer}`;
}

export function parseBlockId(id: string): BlockRef | null {
  const m = /^([LE])(\d+)$/.exec(id);
  return m ? { kind: m[1] === 'L' ? 'layer' : 'experts', layer: Number(m[2]) } : null;
}

/** Model and rig facts for the translation, from a plan answer: this box's GPUs, the devices
 *  other boxes lend and their `--rpc` servers (one per box, in the answer's order). */
export function contextFromResponse(r: Pick<PlanResponse, 'layers' | 'report' | 'boxes'>): PlacementContext {
  const gpuCapacities: number[] = [];
  const lentCapacities: number[] = [];
  const expertLayers = new Set<number>();
  for (const d of r.report.plan.devices) {
    if (d.spec.id.kind === 'gpu') gpuCapacities[d.spec.id.index] = d.spec.capacity_bytes;
    if (d.spec.id.kind === 'rpc') lentCapacities[d.spec.id.index] = d.spec.capacity_bytes;
    for (const l of d.usage.expert_layers) expertLayers.add(l);
  }
  for (let i = 0; i < gpuCapacities.length; i++) gpuCapacities[i] ??= 0;
  for (let i = 0; i < lentCapacities.length; i++) lentCapacities[i] ??= 0;
  const servers = (r.boxes ?? []).map((b) => ({ endpoint: b.endpoint, devices: b.devices.length }));
  return { nLayer: r.layers, gpuCapacities, expertLayers, lentCapacities, servers };
}

/** Where every block is in the daemon's plan for `options`. */
export function layoutFromPlan(plan: Plan, options: PlacementOptions, nLayer: number): PlacedLayout {
  const home: DeviceKey[] = Array<DeviceKey>(nLayer).fill(CPU);
  const experts: (DeviceKey | null)[] = Array<DeviceKey | null>(nLayer).fill(null);
  for (const d of plan.devices) {
    const key = deviceKey(d.spec.id);
    for (const l of d.usage.layers) if (l >= 0 && l < nLayer) home[l] = key;
    for (const l of d.usage.expert_layers) if (l >= 0 && l < nLayer) experts[l] = key;
  }
  const compiled = compileOverrides(options.overrides);
  return {
    home,
    layers: home.map((h, il) => layerWeightsDevice(compiled, il, h)),
    experts,
    kv: home.map((h, il) => (plan.kv_devices[il] ? deviceKey(plan.kv_devices[il]) : h)),
  };
}

/** The layout with `moves` applied (what the user expects to see before the daemon answers). */
export function applyMovesToLayout<T extends Layout>(layout: T, moves: Move[]): T {
  const next = { ...layout, layers: [...layout.layers], experts: [...layout.experts] };
  for (const m of moves) {
    if (m.layer < 0 || m.layer >= next.layers.length) continue;
    if (m.kind === 'layer') next.layers[m.layer] = m.to;
    else if (next.experts[m.layer] != null) next.experts[m.layer] = m.to;
  }
  return next;
}

/** The blocks in one column, layers and experts each in layer order. */
export function blocksIn(layout: Layout, device: DeviceKey): { layers: number[]; experts: number[] } {
  const layers: number[] = [];
  const experts: number[] = [];
  layout.layers.forEach((d, i) => d === device && layers.push(i));
  layout.experts.forEach((d, i) => d === device && experts.push(i));
  return { layers, experts };
}

/** Layer numbers as ranges: [0, 1, 2, 5, 7, 8] → "0–2, 5, 7–8". */
export function formatLayerRanges(layers: number[]): string {
  const xs = [...new Set(layers)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < xs.length; ) {
    let j = i;
    while (j + 1 < xs.length && xs[j + 1] === xs[j]! + 1) j++;
    parts.push(j === i ? String(xs[i]) : `${xs[i]}–${xs[j]}`);
    i = j + 1;
  }
  return parts.join(', ');
}

/** Drag-and-drop payload: the ids of the dragged blocks. */
export const DRAG_TYPE = 'application/x-rigdeck-blocks';
