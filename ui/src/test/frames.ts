// Test fixtures: realistic telemetry frames built from small overrides, modelled on the rigs in the
// product brief (an RTX 3090 on a x1 riser, a hybrid Intel CPU, two NUMA nodes).

import type { Finding, GpuSnapshot, HostSnapshot, TelemetryFrame } from '../lib/api/types';

const GIB = 1024 ** 3;

export function gpu(index: number, over: Partial<GpuSnapshot> = {}): GpuSnapshot {
  return {
    index,
    name: 'NVIDIA GeForce RTX 3090',
    uuid: `GPU-0000000${index}-aaaa-bbbb-cccc-000000000000`,
    pci_bus_id: `00000000:0${index + 1}:00.0`,
    lost: null,
    memory: { total_bytes: 24 * GIB, used_bytes: 20 * GIB, free_bytes: 4 * GIB },
    utilization_gpu_pct: 87,
    utilization_memory_pct: 45,
    temperature_mc: 65_000,
    memory_temperature_mc: null,
    fan_pct: 55,
    power_mw: 300_000,
    power_limit_mw: 350_000,
    clocks: { sm_mhz: 1695, sm_max_mhz: 2100, memory_mhz: 9501, memory_max_mhz: 9751 },
    memory_bus_width_bits: 384,
    peak_bandwidth_bytes_per_s: 936_192_000_000,
    pcie: { gen_current: 4, gen_max: 4, width_current: 16, width_max: 16, tx_bytes_per_s: 1_200_000_000, rx_bytes_per_s: 350_000_000 },
    throttle_reasons: [],
    compute_capability: { major: 8, minor: 6 },
    numa_node: 0,
    processes: [],
    ...over,
  };
}

export function host(over: Partial<HostSnapshot> = {}): HostSnapshot {
  return {
    hostname: 'rig',
    cpu: { model: 'AMD Ryzen 9 9900X', physical_cores: 12, logical_cores: 24, usage_pct: 12.5, cores: [] },
    memory: { total_bytes: 192 * GIB, used_bytes: 40 * GIB, available_bytes: 150 * GIB, swap_total_bytes: 8 * GIB, swap_used_bytes: 0 },
    load_average: { one: 1.5, five: 1.2, fifteen: 0.9 },
    numa_nodes: [{ id: 0, cpus: [0, 1, 2, 3], memory_total_bytes: 192 * GIB, memory_free_bytes: 150 * GIB }],
    model_folders: [],
    problems: [],
    ...over,
  };
}

export function frame(at_ms: number, gpus: GpuSnapshot[], findings: Finding[] = [], h: HostSnapshot = host()): TelemetryFrame {
  return {
    sample: {
      at_ms,
      gpus: { driver: { state: 'ready', driver_version: '580.105.08', cuda_driver_version: 13000 }, gpus },
      host: h,
    },
    findings,
  };
}

export function finding(over: Partial<Finding> & Pick<Finding, 'rule' | 'severity'>): Finding {
  return {
    id: `${over.rule}:${over.gpu_index ?? 'host'}`,
    subject: over.gpu_index != null ? `GPU ${over.gpu_index} · NVIDIA GeForce RTX 3090` : 'Host',
    gpu_index: null,
    title: 'A title',
    explanation: 'An explanation.',
    ...over,
  };
}
