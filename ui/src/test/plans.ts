// Test fixtures for the placement editor: options, devices and plan answers shaped like the
// daemon's (the GLM-5.2 plan on 4× RTX 3090 from docs/api.md, cut down to what a test needs).

import type { DevicePlan, DeviceSpec, PlacementOptions, PlanResponse } from '../lib/api/types';
import { defaultOptions } from '../lib/placement/editor.svelte';

export const GIB = 1024 ** 3;
export const MIB = 1024 ** 2;

/** The editor's defaults with llama-server's own 4096 context, changed by `over`. */
export function options(over: Partial<PlacementOptions> = {}): PlacementOptions {
  return { ...defaultOptions(), context: 4096, ...over };
}

export function gpuSpec(index: number, over: Partial<DeviceSpec> = {}): DeviceSpec {
  return {
    id: { kind: 'gpu', index },
    name: `GPU ${index} · RTX 3090`,
    capacity_bytes: 24 * GIB,
    reserve_bytes: 512 * MIB,
    overhead_bytes: 400 * MIB,
    bandwidth_bytes_per_s: 936_000_000_000,
    link_degraded: false,
    ...over,
  };
}

export function cpuSpec(over: Partial<DeviceSpec> = {}): DeviceSpec {
  return {
    id: { kind: 'cpu' },
    name: 'CPU RAM · Ryzen 9 9900X',
    capacity_bytes: 192 * GIB,
    reserve_bytes: 8 * GIB,
    overhead_bytes: 0,
    bandwidth_bytes_per_s: 89_600_000_000,
    link_degraded: false,
    ...over,
  };
}

export function devicePlan(spec: DeviceSpec, over: Partial<DevicePlan['usage']> = {}, overflow = 0): DevicePlan {
  return {
    spec,
    usage: {
      weights_bytes: 0,
      kv_bytes: 0,
      compute_bytes: 0,
      overhead_bytes: spec.id.kind === 'gpu' ? spec.overhead_bytes : 0,
      layers: [],
      expert_layers: [],
      ...over,
    },
    overflow_bytes: overflow,
  };
}

/** A plan answer with the given devices; KV on each layer's device. */
export function response(devices: DevicePlan[], opts: PlacementOptions, layers: number): PlanResponse {
  const kv_devices = Array.from({ length: layers }, (_, il) => {
    const d = devices.find((x) => x.usage.layers.includes(il));
    return d ? d.spec.id : { kind: 'cpu' as const };
  });
  return {
    model: {
      architecture: 'glm-dsa',
      name: 'GLM-5.2 (synthetic)',
      parameter_count: 743_911_218_432,
      file_size: 206_783_440_576,
      tensor_bytes: 206_777_066_496,
      tensor_count: 1782,
      shard_count: 6,
      file_type: { id: 19, label: 'IQ2_XXS' },
      quantization: [],
      bits_per_weight: 2.22,
      layers,
      context_length: 202_752,
      embedding_length: 6144,
      feed_forward_length: 12288,
      head_count: 64,
      head_count_kv: 1,
      key_length: 576,
      value_length: 512,
      mla: null,
      sliding_window: null,
      sliding_window_pattern: null,
      experts: null,
      vocab_size: 154_880,
    },
    layers,
    experts: { count: 256, used: 8, shared: 1 },
    rig: '4x3090',
    parsed: null,
    report: {
      options: opts,
      fits: devices.every((d) => d.overflow_bytes === 0),
      args: [],
      command_line: { Ok: 'llama-server -m /m/glm.gguf -ngl all' },
      plan: { devices, tensor_devices: [], kv_devices, override_hits: [], n_ctx: 4096, n_ctx_seq: 4096 },
      ceiling: { tokens_per_s: 10.86, stages: [], assumptions: ['80 % of peak bandwidth on GPUs, 70 % on the CPU'] },
      problems: [],
      notes: [],
    },
  };
}
