// A small model of llama.cpp's placement rules, enough to know where a layer's weights and its
// experts land for given options: `-ngl`/`-ts` layer assignment (llama-model.cpp `load_tensors`,
// ported from crates/placement/src/layers.rs and held to the same vectors as the Rust planner:
// simulate.vectors.test.ts) and `-ot` overrides, first match winning.
// The daemon's plan is the truth; this exists so a move in the editor can be turned into the
// smallest change of flags that produces it (see moves.ts).

import type { PlacementOptions, RpcServer, TensorOverride } from '../api/types';
import { CPU, deviceKey, gpuKey, parseDeviceKey, type DeviceKey } from './devices';

/** What the translation needs to know about the model and the rig. */
export interface PlacementContext {
  /** Repeating layers (`block_count`). */
  nLayer: number;
  /** Each GPU's capacity in bytes, by index: llama.cpp splits by these when `-ts` is absent. */
  gpuCapacities: number[];
  /** Layers that have routed experts (`ffn_*_exps`). */
  expertLayers: ReadonlySet<number>;
  /** Each device other boxes lend, by RPC index (absent: none). */
  lentCapacities?: number[];
  /** The `--rpc` servers of those boxes, in order, for options that do not name them yet. */
  servers?: RpcServer[];
}

/** How many devices the options' `--rpc` servers lend. */
export function lentByServers(options: Pick<PlacementOptions, 'rpc_servers'>): number {
  return (options.rpc_servers ?? []).reduce((n, s) => n + s.devices, 0);
}

/** The devices layers are offloaded to, in the order `-ts`, `-mg` and the layer split follow
 *  (crates/placement/src/plan.rs `offload_order`): the `-dev` list when given, else llama.cpp's
 *  own order, the devices lent by the `--rpc` servers first, then this box's GPUs. */
export function offloadOrder(options: Pick<PlacementOptions, 'rpc_servers' | 'devices'>, ctx: PlacementContext): DeviceKey[] {
  const lent = Math.min(lentByServers(options), ctx.lentCapacities?.length ?? 0);
  const known = (key: DeviceKey) => {
    const id = parseDeviceKey(key);
    return capacityOf(key, ctx) != null && !(id?.kind === 'rpc' && id.index >= lent);
  };
  const listed = (options.devices ?? []).map(deviceKey);
  if (listed.length > 0) return listed.filter(known);
  const lentKeys = Array.from({ length: lent }, (_, i) => `rpc-${i}`);
  return [...lentKeys, ...ctx.gpuCapacities.map((_, i) => gpuKey(i))];
}

/** A GPU's or lent device's capacity, or null for one the rig does not have. */
export function capacityOf(key: DeviceKey, ctx: PlacementContext): number | null {
  const id = parseDeviceKey(key);
  if (!id || id.kind === 'cpu') return null;
  const caps = id.kind === 'gpu' ? ctx.gpuCapacities : (ctx.lentCapacities ?? []);
  return caps[id.index] ?? null;
}

/** Each layer's `-ngl`/`-ts` device on the context's rig, in its offload order. */
export function layerHomes(options: PlacementOptions, ctx: PlacementContext): DeviceKey[] {
  const order = offloadOrder(options, ctx);
  return assignOver(ctx.nLayer, order, order.map((k) => capacityOf(k, ctx) ?? 0), options).layers;
}

/** Where each layer's non-expert weights and its experts are (`null`: no experts). */
export interface Layout {
  layers: DeviceKey[];
  experts: (DeviceKey | null)[];
}

/** The device of every repeating layer and of the output layer by `-ngl`/`-ts`/`-sm` alone;
 *  this is also where llama.cpp keeps each layer's KV cache. */
export function assignLayers(
  nLayer: number,
  gpuCapacities: number[],
  options: Pick<PlacementOptions, 'n_gpu_layers' | 'tensor_split' | 'split_mode' | 'main_gpu'>,
): { layers: DeviceKey[]; output: DeviceKey } {
  return assignOver(
    nLayer,
    gpuCapacities.map((_, i) => gpuKey(i)),
    gpuCapacities,
    options,
  );
}

/** As `assignLayers`, over `order` (the offload devices by position) and their capacities. */
function assignOver(
  nLayer: number,
  order: DeviceKey[],
  capacities: number[],
  options: Pick<PlacementOptions, 'n_gpu_layers' | 'tensor_split' | 'split_mode' | 'main_gpu'>,
): { layers: DeviceKey[]; output: DeviceKey } {
  const nGpus = order.length;
  let gpus: number[];
  if (options.split_mode === 'none') gpus = options.main_gpu < nGpus ? [options.main_gpu] : [];
  else gpus = Array.from({ length: nGpus }, (_, i) => i);
  if (gpus.length === 0) {
    return { layers: Array<DeviceKey>(nLayer).fill(CPU), output: CPU };
  }
  const splits = cumulativeSplits(gpus, capacities, options.tensor_split);
  const total = nLayer + 1;
  const ngl = options.n_gpu_layers == null ? total : Math.min(options.n_gpu_layers, total);
  const firstGpuLayer = total - ngl;
  const deviceOf = (il: number): DeviceKey => {
    if (il < firstGpuLayer || ngl === 0) return CPU;
    const position = (il - firstGpuLayer) / ngl;
    // upper_bound: the first split point strictly greater than the position.
    let slot = splits.findIndex((s) => s > position);
    if (slot < 0) slot = splits.length - 1;
    return order[gpus[slot]!]!;
  };
  return { layers: Array.from({ length: nLayer }, (_, il) => deviceOf(il)), output: deviceOf(nLayer) };
}

function cumulativeSplits(gpus: number[], free: number[], tensorSplit: number[]): number[] {
  const given = gpus.map((g) => Math.max(0, tensorSplit[g] ?? 0));
  const weights = given.every((w) => w === 0) ? gpus.map((g) => free[g] ?? 0) : given;
  const sum = weights.reduce((a, b) => a + b, 0);
  if (sum <= 0) return gpus.map((_, i) => (i + 1) / gpus.length);
  let running = 0;
  return weights.map((w) => {
    running += w;
    return running / sum;
  });
}

// ---- Overrides ----

export interface CompiledOverride {
  /** null when the pattern is not a regex JavaScript can run (the daemon still can). */
  regex: RegExp | null;
  device: DeviceKey;
}

/** Rust's regex syntax is close to JavaScript's for what `-ot` patterns use; a leading `(?i)` is
 *  the one common difference. */
export function compilePattern(pattern: string): RegExp | null {
  let source = pattern;
  let flags = '';
  if (source.startsWith('(?i)')) {
    source = source.slice(4);
    flags = 'i';
  }
  try {
    return new RegExp(source, flags);
  } catch {
    return null;
  }
}

export function compileOverrides(overrides: TensorOverride[]): CompiledOverride[] {
  return overrides.map((o) => ({ regex: compilePattern(o.pattern), device: deviceKey(o.device) }));
}

/** Index of the first override whose pattern occurs in `name` (the first match wins), or -1. */
export function firstMatch(compiled: CompiledOverride[], name: string): number {
  return compiled.findIndex((c) => c.regex != null && c.regex.test(name));
}

/** The routed-expert tensors of a layer, as GGUF names them. */
export function expertTensorNames(layer: number): string[] {
  return ['gate', 'up', 'down'].map((p) => `blk.${layer}.ffn_${p}_exps.weight`);
}

/** Non-expert tensors of a layer that stand for the "rest of the layer". */
export function layerTensorNames(layer: number): string[] {
  return ['attn_norm', 'attn_q', 'attn_output', 'ffn_norm'].map((p) => `blk.${layer}.${p}.weight`);
}

/** The device most of `names` land on: an override's, or `fallback` where none matches. */
function deviceOfNames(compiled: CompiledOverride[], names: string[], fallback: DeviceKey): DeviceKey {
  const votes = new Map<DeviceKey, number>();
  for (const name of names) {
    const hit = firstMatch(compiled, name);
    const dev = hit >= 0 ? compiled[hit]!.device : fallback;
    votes.set(dev, (votes.get(dev) ?? 0) + 1);
  }
  let best = fallback;
  let bestVotes = -1;
  for (const [dev, n] of votes) {
    if (n > bestVotes) {
      best = dev;
      bestVotes = n;
    }
  }
  return best;
}

/** Where a layer's weights go given its `-ts` device ("home") and the overrides. */
export function layerWeightsDevice(compiled: CompiledOverride[], layer: number, home: DeviceKey): DeviceKey {
  return deviceOfNames(compiled, layerTensorNames(layer), home);
}

/** Where a layer's experts go given its `-ts` device and the overrides. */
export function expertsDevice(compiled: CompiledOverride[], layer: number, home: DeviceKey): DeviceKey {
  return deviceOfNames(compiled, expertTensorNames(layer), home);
}

/** The layout these options give, by the rules above. */
export function simulate(options: PlacementOptions, ctx: PlacementContext): Layout & { home: DeviceKey[] } {
  const home = layerHomes(options, ctx);
  const compiled = compileOverrides(options.overrides);
  return {
    home,
    layers: home.map((h, il) => layerWeightsDevice(compiled, il, h)),
    experts: home.map((h, il) => (ctx.expertLayers.has(il) ? expertsDevice(compiled, il, h) : null)),
  };
}
