// Moving blocks in the editor, translated into llama-server's own terms (PlacementOptions):
//
// - A layer's experts: an `-ot` entry `blk\.(a|b|…)\.ffn_.*_exps=DEVICE`, one per device, edited
//   in place (the automatic placer writes the same shape), placed before the first entry that
//   would otherwise take those tensors, so a CPU catch-all (`\.ffn_(up|down|gate|gate_up)_(ch|)exps`)
//   stays last. A layer moved back where the entries already send it leaves no entry behind.
// - Whole layers: `-ngl` (layers kept on the CPU, from the first) and `-ts` (one contiguous range
//   per offload device, in llama.cpp's device order, the output layer with the last one) when the
//   layout can be said that way; otherwise per-layer entries `blk\.(a|b|…)\.=DEVICE`. llama.cpp
//   keeps a layer's KV cache on its -ngl/-ts device, so such entries move the layer's weights but
//   not its KV.
// - Devices other boxes lend (RPC0…): the first move onto one adds the boxes' `--rpc` servers and a
//   `-dev` list (this box's devices as before, then the lent ones at `-ts` 0); with lent devices,
//   `-dev` is reordered when that lets every device keep one range of layers.
//
// Pure functions; the daemon plans the result and is the judge of where things really land.

import type { DeviceId, PlacementOptions, TensorOverride } from '../api/types';
import { CPU, deviceKey, isLentKey, parseDeviceKey, type DeviceKey } from './devices';
import { applyMovesToLayout, type BlockKind, type Move } from './layout';
import {
  compileOverrides,
  compilePattern,
  expertTensorNames,
  firstMatch,
  layerHomes,
  layerTensorNames,
  lentByServers,
  offloadOrder,
  simulate,
  type Layout,
  type PlacementContext,
} from './simulate';

/** The shape of a new experts entry's pattern after the layer list (the automatic placer's). */
export const EXPERTS_SUFFIX = String.raw`\.ffn_.*_exps`;
/** `-ncmoe`'s per-layer entries end like this (llama.cpp's LLM_FFN_EXPS_REGEX). */
export const NCMOE_SUFFIX = String.raw`\.ffn_(up|down|gate|gate_up)_(ch|)exps`;
/** A whole layer's entry: `blk\.12\.`. */
export const LAYER_SUFFIX = String.raw`\.`;
/** llama.cpp's `-cmoe`: every routed expert to the CPU. */
export const CPU_CATCH_ALL = NCMOE_SUFFIX;

export interface LayerGroup {
  kind: BlockKind;
  layers: number[];
  /** The pattern after the layer list, kept when the entry is rewritten. */
  suffix: string;
}

const GROUP = /^blk\\\.(?:\((\d+(?:\|\d+)*)\)|(\d+))(.*)$/;

/** Reads an entry this editor can edit: `blk\.(3|4)\.ffn_.*_exps`, `blk\.7\.ffn_(up|…)_(ch|)exps`
 *  (from -ncmoe) or `blk\.(3|4)\.` (whole layers). Anything else is left exactly as it is. */
export function parseGroup(pattern: string): LayerGroup | null {
  const m = GROUP.exec(pattern);
  if (!m) return null;
  const list = (m[1] ?? m[2] ?? '').split('|').map(Number);
  const suffix = m[3] ?? '';
  if (suffix === EXPERTS_SUFFIX || suffix === NCMOE_SUFFIX) return { kind: 'experts', layers: list, suffix };
  if (suffix === LAYER_SUFFIX) return { kind: 'layer', layers: list, suffix };
  return null;
}

/** Writes a group's pattern: layers in ascending order, `blk\.5\.` for one, `blk\.(3|4)\.` for more. */
export function formatGroup(layers: number[], suffix: string): string {
  const list = [...new Set(layers)].sort((a, b) => a - b);
  const head = list.length === 1 ? String(list[0]) : `(${list.join('|')})`;
  return String.raw`blk\.` + head + suffix;
}

/** An entry that sends every routed expert to the CPU (`-cmoe`, `exps=CPU`, …); it belongs last. */
export function isCatchAll(o: TensorOverride): boolean {
  if (o.device.kind !== 'cpu' || o.pattern.includes('blk')) return false;
  const re = compilePattern(o.pattern);
  if (!re) return false;
  return [...expertTensorNames(3), ...expertTensorNames(61)].every((n) => re.test(n));
}

function deviceOf(key: DeviceKey): TensorOverride['device'] {
  return parseDeviceKey(key) ?? { kind: 'cpu' };
}

/** Removes `layer` from this editor's entries of `kind`; entries left empty are dropped. */
export function withoutLayer(overrides: TensorOverride[], kind: BlockKind, layer: number): TensorOverride[] {
  const out: TensorOverride[] = [];
  for (const o of overrides) {
    const g = parseGroup(o.pattern);
    if (!g || g.kind !== kind || !g.layers.includes(layer)) {
      out.push(o);
      continue;
    }
    const rest = g.layers.filter((l) => l !== layer);
    if (rest.length > 0) out.push({ pattern: formatGroup(rest, g.suffix), device: o.device });
  }
  return out;
}

/** Sends `layer`'s block of `kind` to `to`: joins that device's entry when it comes early enough
 *  to win, else a new entry goes just before the first entry that would take the tensors (or
 *  before a CPU catch-all, or at the end). */
export function addToGroup(overrides: TensorOverride[], kind: BlockKind, layer: number, to: DeviceKey): TensorOverride[] {
  const names = kind === 'experts' ? expertTensorNames(layer) : layerTensorNames(layer);
  const compiled = compileOverrides(overrides);
  const hits = names.map((n) => firstMatch(compiled, n)).filter((i) => i >= 0);
  const first = hits.length > 0 ? Math.min(...hits) : -1;
  const joinable = overrides.findIndex(
    (o, i) => (first < 0 || i < first) && deviceKey(o.device) === to && parseGroup(o.pattern)?.kind === kind,
  );
  const out = [...overrides];
  if (joinable >= 0) {
    const o = out[joinable]!;
    const g = parseGroup(o.pattern)!;
    out[joinable] = { pattern: formatGroup([...g.layers, layer], g.suffix), device: o.device };
    return out;
  }
  const entry: TensorOverride = {
    pattern: formatGroup([layer], kind === 'experts' ? EXPERTS_SUFFIX : LAYER_SUFFIX),
    device: deviceOf(to),
  };
  let at = first;
  if (at < 0) {
    const catchAll = out.findIndex(isCatchAll);
    at = catchAll >= 0 ? catchAll : out.length;
  }
  out.splice(at, 0, entry);
  return out;
}

/** `-ngl`/`-ts` that put every layer where `layers` says, when that is possible: CPU layers
 *  first, then one contiguous range per offload device in `order` (llama.cpp's device order, the
 *  `-dev` list). The output layer goes with the last device that holds layers, so it counts in
 *  that device's share. `tensor_split: null` keeps the old one. */
export function splitFor(
  layers: DeviceKey[],
  order: readonly DeviceKey[],
): { n_gpu_layers: number | null; tensor_split: number[] | null } | null {
  const n = layers.length;
  let k = 0;
  while (k < n && layers[k] === CPU) k++;
  if (k === n) return { n_gpu_layers: 0, tensor_split: null };
  const counts = Array<number>(order.length).fill(0);
  let last = -1;
  for (let i = k; i < n; i++) {
    const p = order.indexOf(layers[i]!);
    if (p < 0 || p < last) return null;
    counts[p] = counts[p]! + 1;
    last = p;
  }
  counts[last] = counts[last]! + 1;
  return { n_gpu_layers: k === 0 ? null : n + 1 - k, tensor_split: counts };
}

/** A device order (`-dev`) in which `layers` are contiguous ranges: the devices in the order
 *  their ranges come, then the rest of `order`; null when a device's layers are not one range. */
export function orderFor(layers: DeviceKey[], order: readonly DeviceKey[]): DeviceKey[] | null {
  const runs: DeviceKey[] = [];
  for (const d of layers) {
    if (runs.at(-1) === d || (d === CPU && runs.length === 0)) continue;
    if (d === CPU || runs.includes(d)) return null;
    runs.push(d);
  }
  return [...runs, ...order.filter((d) => !runs.includes(d))];
}

function idsOf(order: readonly DeviceKey[]): DeviceId[] {
  return order.map((k) => parseDeviceKey(k)).filter((id): id is DeviceId => id != null);
}

/** Options whose `--rpc` names the other boxes' servers, for a move onto a lent device: `-dev`
 *  lists this box's devices as before, then the lent ones, and `-ts` keeps every layer where it
 *  was (the lent devices at 0). Unchanged when the servers are already there. */
export function withLentServers(o: PlacementOptions, ctx: PlacementContext): PlacementOptions {
  const servers = ctx.servers ?? [];
  if (lentByServers(o) > 0 || servers.length === 0) return o;
  const homes = layerHomes(o, ctx);
  const before = offloadOrder(o, ctx);
  const lent = (ctx.lentCapacities ?? []).map((_, i) => deviceKey({ kind: 'rpc', index: i }));
  const order = [...before, ...lent.filter((k) => !before.includes(k))];
  const split = splitFor(homes, order);
  const padded = o.tensor_split.length > 0 ? [...o.tensor_split, ...Array<number>(order.length - before.length).fill(0)] : o.tensor_split;
  return {
    ...o,
    rpc_servers: servers.map((s) => ({ ...s })),
    devices: idsOf(order),
    tensor_split: split?.tensor_split ?? padded,
  };
}

/** `-ngl`/`-ts` (and on a rig of several boxes `-dev`, with `-mg` following its device) that put
 *  every layer where `layers` says, or null when only per-layer entries can. */
function layerSplit(o: PlacementOptions, ctx: PlacementContext, layers: DeviceKey[]): Partial<PlacementOptions> | null {
  const order = offloadOrder(o, ctx);
  const split = splitFor(layers, order);
  if (split) return { n_gpu_layers: split.n_gpu_layers, ...(split.tensor_split ? { tensor_split: split.tensor_split } : {}) };
  if (lentByServers(o) === 0) return null;
  const reordered = orderFor(layers, order);
  const across = reordered && splitFor(layers, reordered);
  if (!reordered || !across) return null;
  const main = reordered.indexOf(order[o.main_gpu] ?? '');
  return {
    n_gpu_layers: across.n_gpu_layers,
    ...(across.tensor_split ? { tensor_split: across.tensor_split } : {}),
    devices: idsOf(reordered),
    main_gpu: main >= 0 ? main : o.main_gpu,
  };
}

function sameList<T>(a: T[], b: T[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function cloneOptions(o: PlacementOptions): PlacementOptions {
  return {
    ...o,
    tensor_split: [...o.tensor_split],
    overrides: o.overrides.map((x) => ({ ...x, device: { ...x.device } })),
    ...(o.rpc_servers ? { rpc_servers: o.rpc_servers.map((x) => ({ ...x })) } : {}),
    ...(o.devices ? { devices: o.devices.map((x) => ({ ...x })) } : {}),
  };
}

/**
 * The options that put the moved blocks where the user dropped them and leave everything else
 * where `current` (the daemon's last plan for `options`) has it.
 */
export function applyMoves(
  options: PlacementOptions,
  ctx: PlacementContext,
  current: Layout,
  moves: Move[],
): PlacementOptions {
  const effective = moves.filter((m) => {
    const now = m.kind === 'layer' ? current.layers[m.layer] : current.experts[m.layer];
    return now != null && now !== m.to;
  });
  if (effective.length === 0) return options;
  const desired = applyMovesToLayout(current, effective);
  const movedLayers = new Set(effective.filter((m) => m.kind === 'layer').map((m) => m.layer));
  const movedExperts = new Set(effective.filter((m) => m.kind === 'experts').map((m) => m.layer));
  // Blocks whose place the rules here do not reproduce (a pattern only the daemon's regex engine
  // reads, say) are left alone unless the user moved them.
  const before = simulate(options, ctx);
  const trustLayer = (i: number) => movedLayers.has(i) || before.layers[i] === current.layers[i];
  const trustExperts = (i: number) => movedExperts.has(i) || before.experts[i] === current.experts[i];

  let o = cloneOptions(options);
  if (effective.some((m) => isLentKey(m.to))) o = withLentServers(o, ctx);
  for (const l of movedExperts) o.overrides = withoutLayer(o.overrides, 'experts', l);
  if (movedLayers.size > 0) {
    for (const l of movedLayers) o.overrides = withoutLayer(o.overrides, 'layer', l);
    const home = layerHomes(o, ctx);
    if (!sameList(home, desired.layers)) {
      const split = layerSplit(o, ctx, desired.layers);
      if (split) {
        o = { ...o, ...split };
        if (o.split_mode === 'none' && split.n_gpu_layers !== 0) o.split_mode = 'layer';
        // The split now puts every layer in place: per-layer entries are no longer needed.
        o.overrides = o.overrides.filter((x) => parseGroup(x.pattern)?.kind !== 'layer');
      }
    }
  }

  const mismatches = (opts: PlacementOptions) => {
    const sim = simulate(opts, ctx);
    const layers: number[] = [];
    const experts: number[] = [];
    for (let i = 0; i < ctx.nLayer; i++) {
      if (trustLayer(i) && sim.layers[i] !== desired.layers[i]) layers.push(i);
      const want = desired.experts[i];
      if (want != null && trustExperts(i) && sim.experts[i] !== want) experts.push(i);
    }
    return { layers, experts };
  };

  // Whole-layer entries first (they also catch the layer's experts), then the experts.
  for (let pass = 0; pass < 4; pass++) {
    const miss = mismatches(o);
    if (miss.layers.length > 0) {
      for (const l of miss.layers) o.overrides = addToGroup(o.overrides, 'layer', l, desired.layers[l]!);
      continue;
    }
    if (miss.experts.length === 0) break;
    for (const l of miss.experts) o.overrides = addToGroup(o.overrides, 'experts', l, desired.experts[l]!);
  }

  // Entries a move made unnecessary (a layer moved back home) go, so undo gives the old flags back.
  const clean = (opts: PlacementOptions) => {
    const m = mismatches(opts);
    return m.layers.length === 0 && m.experts.length === 0;
  };
  for (const l of new Set([...movedLayers, ...movedExperts])) {
    for (const kind of ['experts', 'layer'] as const) {
      const trial = { ...o, overrides: withoutLayer(o.overrides, kind, l) };
      if (JSON.stringify(trial.overrides) !== JSON.stringify(o.overrides) && clean(trial)) o.overrides = trial.overrides;
    }
  }
  return o;
}

/** Layers whose weights a per-layer `-ot` entry sends away from their -ngl/-ts device (their KV
 *  cache stays behind). */
export function layersMovedByOverrides(options: PlacementOptions): number[] {
  const out = new Set<number>();
  for (const o of options.overrides) {
    const g = parseGroup(o.pattern);
    if (g?.kind === 'layer') g.layers.forEach((l) => out.add(l));
  }
  return [...out].sort((a, b) => a - b);
}
