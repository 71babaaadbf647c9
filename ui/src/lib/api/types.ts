// TypeScript mirror of the daemon's JSON (docs/api.md and crates/core/src/telemetry/snapshot.rs).
// Field names and nullability follow the Rust structs one for one: `Option<T>` is `T | null`.
// Units stay raw (bytes, milli-watts, milli-degrees Celsius, bytes per second, MHz, epoch ms);
// src/lib/format turns them into text.

/** Milliseconds since the Unix epoch. */
export type UnixMillis = number;

// ---- Telemetry snapshot (snapshot.rs) ----

export interface RigSample {
  at_ms: UnixMillis;
  gpus: GpuReadout;
  host: HostSnapshot;
}

export interface GpuReadout {
  driver: DriverState;
  gpus: GpuSnapshot[];
}

/** `#[serde(tag = "state", rename_all = "snake_case")]` */
export type DriverState =
  | {
      state: 'ready';
      driver_version: string | null;
      /** CUDA driver API version as NVML reports it, e.g. 13000 for 13.0. */
      cuda_driver_version: number | null;
    }
  | { state: 'no_driver'; message: string }
  | { state: 'failed'; message: string };

export interface GpuSnapshot {
  /** NVML index (the order `nvidia-smi` uses). */
  index: number;
  name: string | null;
  uuid: string | null;
  /** Domain:bus:device.function, e.g. `00000000:01:00.0`. */
  pci_bus_id: string | null;
  /** Set when the GPU stopped answering; the other values are then absent. */
  lost: string | null;
  memory: GpuMemory | null;
  utilization_gpu_pct: number | null;
  utilization_memory_pct: number | null;
  temperature_mc: number | null;
  memory_temperature_mc: number | null;
  fan_pct: number | null;
  power_mw: number | null;
  power_limit_mw: number | null;
  clocks: GpuClocks;
  memory_bus_width_bits: number | null;
  peak_bandwidth_bytes_per_s: number | null;
  pcie: PcieLink;
  /** NVML clock-throttle reasons currently active, as snake_case names. */
  throttle_reasons: string[] | null;
  compute_capability: ComputeCapability | null;
  numa_node: number | null;
  processes: GpuProcess[];
}

export interface GpuMemory {
  total_bytes: number;
  used_bytes: number;
  free_bytes: number;
}

export interface GpuClocks {
  sm_mhz: number | null;
  sm_max_mhz: number | null;
  memory_mhz: number | null;
  memory_max_mhz: number | null;
}

export interface PcieLink {
  gen_current: number | null;
  gen_max: number | null;
  width_current: number | null;
  width_max: number | null;
  tx_bytes_per_s: number | null;
  rx_bytes_per_s: number | null;
}

export interface ComputeCapability {
  major: number;
  minor: number;
}

export type GpuProcessKind = 'compute' | 'graphics';

export interface GpuProcess {
  pid: number;
  name: string | null;
  /** VRAM held on this GPU; null where the driver does not say (e.g. some WSL setups). */
  used_bytes: number | null;
  kind: GpuProcessKind;
  started_by_rigdeck: boolean;
}

export interface HostSnapshot {
  hostname: string | null;
  cpu: CpuSnapshot;
  memory: HostMemory;
  load_average: LoadAverage | null;
  numa_nodes: NumaNode[];
  model_folders: FolderSpace[];
  /** Things that could not be read this tick, each naming the path. */
  problems: string[];
}

export interface CpuSnapshot {
  model: string | null;
  physical_cores: number | null;
  logical_cores: number;
  /** Average over all logical CPUs, 0–100. */
  usage_pct: number;
  cores: CoreLoad[];
}

export type CoreKind = 'performance' | 'efficiency';

export interface CoreLoad {
  /** Logical CPU number as the kernel numbers it (`cpuN`). */
  id: number;
  usage_pct: number;
  frequency_mhz: number | null;
  kind: CoreKind | null;
}

export interface HostMemory {
  total_bytes: number;
  used_bytes: number;
  available_bytes: number;
  swap_total_bytes: number;
  swap_used_bytes: number;
}

export interface LoadAverage {
  one: number;
  five: number;
  fifteen: number;
}

export interface NumaNode {
  id: number;
  cpus: number[];
  memory_total_bytes: number | null;
  memory_free_bytes: number | null;
}

export interface FolderSpace {
  path: string;
  exists: boolean;
  /** Mount point of the file system that holds the folder (or its nearest existing parent). */
  mount_point: string | null;
  available_bytes: number | null;
  total_bytes: number | null;
}

// ---- Findings ----

export type Severity = 'info' | 'warning' | 'critical';

export type FindingRule =
  | 'pcie_narrow'
  | 'pcie_gen_low'
  | 'gpu_hot'
  | 'memory_hot'
  | 'thermal_throttle'
  | 'power_throttle'
  | 'foreign_vram'
  | 'gpu_lost'
  | 'ram_nearly_full'
  | 'swap_in_use';

export interface Finding {
  id: string;
  /** One of FindingRule; kept open so a newer daemon's rule still renders. */
  rule: FindingRule | (string & {});
  severity: Severity;
  subject: string;
  /** null for host findings. */
  gpu_index: number | null;
  title: string;
  explanation: string;
}

// ---- API answers ----

export interface TelemetryFrame {
  sample: RigSample;
  findings: Finding[];
}

export interface ServerStatus {
  version: string;
  started_at_ms: UnixMillis;
  bind: string;
  telemetry_period_ms: number;
  ws_clients: number;
  data_dir: string;
}

export type HistoryRange = '15m' | '1h' | '24h';

export interface GpuHistory {
  uuid: string | null;
  index: number;
  name: string | null;
  t: UnixMillis[];
  utilization_gpu_pct: (number | null)[];
  memory_used_bytes: (number | null)[];
  memory_total_bytes: number | null;
  temperature_mc: (number | null)[];
  power_mw: (number | null)[];
}

export interface HostHistory {
  t: UnixMillis[];
  cpu_usage_pct: (number | null)[];
  memory_used_bytes: (number | null)[];
}

export interface History {
  range: HistoryRange;
  step_ms: number;
  /** `memory` for 15m (one point a sample), `database` for 1h and 24h (10 s averages). */
  source: 'memory' | 'database';
  gpus: GpuHistory[];
  host: HostHistory;
}

export interface Settings {
  telemetry_period_ms: number;
  model_folders: string[];
  keep_running_in_background: boolean;
}

/** Every error body: the message names the thing and the fix. */
export interface ApiErrorBody {
  code: string;
  message: string;
}

// ---- WebSocket /api/v1/events ----

export interface Hello {
  version: string;
  telemetry_period_ms: number;
}

export type ServerEvent =
  | { type: 'hello'; data: Hello }
  | { type: 'telemetry.frame'; data: TelemetryFrame }
  /** A type this UI does not know yet (a newer daemon); ignored, never an error. */
  | { type: 'other'; name: string };
