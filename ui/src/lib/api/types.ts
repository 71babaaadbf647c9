// TypeScript mirror of the daemon's JSON (docs/api.md and crates/core/src/telemetry/snapshot.rs).
// Field names and nullability follow the Rust structs one for one: `Option<T>` is `T | null`.
// Units stay raw (bytes, milli-watts, milli-degrees Celsius, bytes per second, MHz, epoch ms);
// src/lib/format turns them into text.

import type { RunSummary, TuneView } from '../bench/types';
import type { Reference } from '../quality/types';

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
  /** The Rigdeck instance (launch profile) this engine runs, when Rigdeck started it. */
  rigdeck_instance: string | null;
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
  history_available: boolean;
  engines_at_start: EnginesAtStart;
}

/** What the daemon did about engines as it started. Pairs are [profile name, why]. */
export interface EnginesAtStart {
  recovery: { adopted: string[]; cleaned_up: string[]; failed: [string, string][] };
  autostart: { started: string[]; already_running: string[]; skipped: [string, string][]; refused: string | null };
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
  /** Where model downloads go: null is the shared Hugging Face cache (the default). PUT an
   *  absolute path to choose a plain folder, or "" to go back to the cache. */
  download_folder: string | null;
  /** Days of gateway usage kept (1–3650); older requests are deleted at start and daily. */
  usage_retention_days: number;
  /** The host's memory bandwidth in GB/s as the user typed it (it wins over Rigdeck's
   *  measurement); null: the measurement is used. PUT 0 to go back to the measurement. */
  cpu_bandwidth_gb_s: number | null;
  /** The first-run page was skipped: the app opens on the dashboard even with no profile. */
  welcome_skipped: boolean;
  /** Disk the quality references' files may take, in GB (1–100000); absent from older daemons. */
  quality_reference_budget_gb?: number;
}

/** A reading of the host's memory read bandwidth and how it was taken
 *  (GET/POST /api/v1/host/memory-bandwidth). */
export interface MemoryBandwidthReading {
  bytes_per_s: number;
  buffer_bytes: number;
  threads: number;
  passes: number;
  elapsed_ms: number;
  measured_at_ms: number;
}

/** What the planner uses for the CPU's speed ceiling, and where it comes from. */
export interface MemoryBandwidthStatus {
  in_use_bytes_per_s: number | null;
  source: 'settings' | 'measured' | null;
  settings_gb_s: number | null;
  measured: MemoryBandwidthReading | null;
  /** A measurement is running now (the first start's, or one asked for). */
  measuring: boolean;
  /** Why the last measurement failed, until one succeeds. */
  problem: string | null;
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
  /** The model library changed on disk: the full new list. */
  | { type: 'library.changed'; data: ModelEntry[] }
  /** An instance changed state (its full view). */
  | { type: 'instance.state'; data: InstanceView }
  /** One line of engine output. */
  | { type: 'instance.log'; data: LogLine }
  /** Progress of a bundled llama.cpp build. */
  | { type: 'engine.build'; data: BuildProgress }
  /** A download was queued, started, paused, failed, finished…: its full view. */
  | { type: 'download.state'; data: DownloadView }
  /** A running download's bytes, rate and time left (twice a second; may be skipped). */
  | { type: 'download.progress'; data: DownloadView }
  /** Events were dropped for this client (it fell behind): refetch what the page shows. */
  | { type: 'resync'; data: { missed: number; channel: string } }
  /** A chat message was created or changed state (streaming, complete, stopped, error). */
  | { type: 'chat.message'; data: ChatMessage }
  /** Text for a reply being written (may be dropped under load: offsets tell). */
  | { type: 'chat.delta'; data: ChatDelta }
  /** A benchmark run started, finished a run of a step, or ended: its list entry. */
  | { type: 'bench.run'; data: RunSummary }
  /** A tuning started, began or ended a trial, or ended: the tuning whole. */
  | { type: 'bench.tune'; data: TuneView }
  /** A quality reference started recording, moved on, became ready or failed: the reference whole. */
  | { type: 'quality.reference'; data: Reference }
  /** A "run this model" request moved on (checking, downloading, … ready, failed): its view. */
  | { type: 'model_run.state'; data: ModelRun }
  /** A type this UI does not know yet (a newer daemon); ignored, never an error. */
  | { type: 'other'; name: string };

// ---- Models and placement (docs/api.md "Models and placement") ----

/** One file of a model (a shard of a split GGUF, or a safetensors part). */
export interface FileStamp {
  path: string;
  size_bytes: number;
  modified_ms: UnixMillis;
}

/** A hyper-parameter that is one number for all layers or one per layer (`head_count_kv` of
 *  models that mix attention types). */
export type PerLayer = number | number[];

/** `{"period": n}` (every n-th layer is full attention) or `{"per_layer": [bool]}`. */
export type SlidingWindowPattern = { period: number } | { per_layer: boolean[] };

export interface Mla {
  key_length_mla: number | null;
  value_length_mla: number | null;
  kv_lora_rank: number | null;
  q_lora_rank: number | null;
  /** llama.cpp switches MLA on only when both MLA lengths are present. */
  active: boolean;
}

export interface ExpertsSummary {
  count: number;
  used: number | null;
  shared: number | null;
  leading_dense_blocks: number | null;
  feed_forward_length: number | null;
}

/** Tensors of one ggml type: the quantization histogram's bars. */
export interface TypeUsage {
  ggml_type: string;
  tensors: number;
  elements: number;
  bytes: number;
}

/** crates/gguf/src/summary.rs `ModelSummary`. */
export interface ModelSummary {
  architecture: string | null;
  name: string | null;
  parameter_count: number;
  file_size: number | null;
  tensor_bytes: number;
  tensor_count: number;
  shard_count: number;
  file_type: { id: number; label: string } | null;
  /** Largest first. */
  quantization: TypeUsage[];
  bits_per_weight: number | null;
  layers: number | null;
  context_length: number | null;
  embedding_length: number | null;
  feed_forward_length: PerLayer | null;
  head_count: PerLayer | null;
  head_count_kv: PerLayer | null;
  key_length: number | null;
  value_length: number | null;
  /** The sliding-window layers' heads where they differ (Gemma 4). Absent from older daemons. */
  key_length_swa?: number | null;
  value_length_swa?: number | null;
  /** The last layers that read an earlier layer's cache (Gemma 3n, Gemma 4 E2B/E4B). */
  shared_kv_layers?: number | null;
  mla: Mla | null;
  sliding_window: number | null;
  sliding_window_pattern: SlidingWindowPattern | null;
  experts: ExpertsSummary | null;
  vocab_size: number | null;
  /** `tokenizer.chat_template`: its size and extra named templates; null when the file has none
   *  (llama-server would use ChatML). Absent from older daemons. */
  chat_template?: { bytes: number; names: string[] } | null;
}

/** The facts vLLM and SGLang need, from a safetensors folder's config.json. */
export interface SafetensorsInfo {
  architecture: string | null;
  model_type: string | null;
  layers: number | null;
  hidden_size: number | null;
  attention_heads: number | null;
  kv_heads: number | null;
  context_length: number | null;
  vocab_size: number | null;
  experts: number | null;
  experts_per_token: number | null;
  kv_lora_rank: number | null;
  dtype: string | null;
  quantization: string | null;
}

export interface ModelEntry {
  /** What to give the planner: the first shard, or the safetensors folder. */
  path: string;
  name: string;
  format: 'gguf' | 'safetensors';
  folder: string;
  files: FileStamp[];
  size_bytes: number;
  gguf: ModelSummary | null;
  safetensors: SafetensorsInfo | null;
  /** Why the model cannot be used as it is, with the fix. */
  problem: string | null;
  /** Set for a tag of an Ollama store: `path` is then its GGUF blob, `name` the tag. */
  ollama: OllamaModel | null;
}

/** What a model read from Ollama's store carries (crates/core/src/library/ollama.rs). */
export interface OllamaModel {
  /** The tag as Ollama shows it: `qwen3:8b`, `user/model:tag`, `hf.co/org/repo:tag`. */
  tag: string;
  manifest: string;
  /** The vision projector's blob (llama-server's `--mmproj`), for a multimodal model. */
  projector: string | null;
}

/** A folder where another tool keeps models on this machine (GET /api/v1/models/found-folders). */
export interface KnownFolder {
  tool: 'Hugging Face' | 'LM Studio' | 'llama.cpp' | 'Ollama' | 'Jan';
  path: string;
  /** The path as a user types it: `~/.ollama/models` under the home folder. */
  display_path: string;
  models: number;
  size_bytes: number;
  /** One of the library's folders is this one or holds it. */
  added: boolean;
  /** One line per model that cannot be used ("qwen3:8b: …"), or why the folder cannot be read. */
  problems: string[];
}

/** The answer of POST /api/v1/models/folders. */
export interface AddedFolder {
  path: string;
  /** The folder was already read by the library: nothing was changed. */
  already_in_library: boolean;
  model_folders: string[];
  models: ModelEntry[];
}

/** `#[serde(tag = "kind", content = "index")]`: a GPU by backend index (CUDA0…), host memory, or
 *  a device another box lends over llama.cpp RPC (RPC0…, numbered as llama.cpp numbers them). */
export type DeviceId = { kind: 'gpu'; index: number } | { kind: 'cpu' } | { kind: 'rpc'; index: number };

/** One `--rpc` server and how many devices it lends. */
export interface RpcServer {
  endpoint: string;
  devices: number;
}

/** crates/placement/src/link.rs `Link`: a link from the head box to another. */
export interface Link {
  /** `2.5 GbE`, or `measured`. */
  name: string;
  throughput_bytes_per_s: number;
  /** One way, seconds. */
  latency_s: number;
}

/** A named link as GET /api/v1/rigs/links lists it. */
export interface LinkOption {
  id: string;
  link: Link;
}

/** A box lending devices over a link (`RemoteBox`). */
export interface RemoteBox {
  name: string;
  endpoint: string;
  link: Link;
  devices: DeviceId[];
}

/** Another box of a planned rig: a preset and the link to it (`AlsoBox`). */
export interface AlsoBox {
  preset: string;
  link: string | { throughput_bytes_per_s: number; latency_s: number };
  lend?: number[] | null;
}

/** A plan's rig: `live`, a preset id, or either with other boxes. */
export type RigRequest = string | { preset: string; also: AlsoBox[] };

/** What one link adds to every token and to the load (`LinkCost`). */
export interface LinkCost {
  box_name: string;
  link: Link;
  crossings_per_token: number;
  bytes_per_token: number;
  seconds_per_token: number;
  load_bytes: number;
  load_seconds: number;
}

export interface DeviceSpec {
  id: DeviceId;
  name: string;
  /** Free VRAM (live) or total (preset); host RAM for the CPU. */
  capacity_bytes: number;
  /** Kept free on purpose (the user's reserve). */
  reserve_bytes: number;
  /** CUDA context and the like, lost before any tensor lands. */
  overhead_bytes: number;
  bandwidth_bytes_per_s: number | null;
  /** On a link of x4 or less: fine alone, bad inside a split. */
  link_degraded: boolean;
  /** This rig's records for the device, applied by the plan (absent from a preset's spec). */
  correction?: PlanCorrection | null;
}

export interface RigPreset {
  id: string;
  name: string;
  source: string;
  devices: DeviceSpec[];
}

export type SplitMode = 'none' | 'layer' | 'row';

export type KvType = 'f32' | 'f16' | 'bf16' | 'q8_0' | 'q5_1' | 'q5_0' | 'q4_1' | 'q4_0' | 'iq4_nl';

export const KV_TYPES: readonly KvType[] = ['f32', 'f16', 'bf16', 'q8_0', 'q5_1', 'q5_0', 'q4_1', 'q4_0', 'iq4_nl'];

/** One `-ot` entry: tensors whose name contains a match of `pattern` go to `device`. */
export interface TensorOverride {
  pattern: string;
  device: DeviceId;
}

/** crates/core/src/placement/options.rs: llama-server's placement knobs. */
export interface PlacementOptions {
  /** `-ngl`: layers on GPUs, the output layer counting as one; null = all. */
  n_gpu_layers: number | null;
  /** `-ts`; empty = by each GPU's free memory. */
  tensor_split: number[];
  split_mode: SplitMode;
  main_gpu: number;
  /** In command-line order; the first match wins; a CPU catch-all belongs last. */
  overrides: TensorOverride[];
  /** `-c` (0 = the model's trained context). */
  context: number;
  parallel: number;
  kv_unified: boolean;
  cache_type_k: KvType;
  cache_type_v: KvType;
  flash_attention: boolean;
  batch: number;
  ubatch: number;
  kv_offload: boolean;
  op_offload: boolean;
  threads: number | null;
  /** `--rpc`: servers lending devices of other boxes (absent: none). */
  rpc_servers?: RpcServer[];
  /** `-dev`: the offload devices in order (absent or empty: llama.cpp's order). */
  devices?: DeviceId[];
}

export interface Margins {
  gpu_reserve_bytes: number;
  gpu_overhead_bytes: number;
  ram_reserve_bytes: number;
  cpu_bandwidth_bytes_per_s: number | null;
}

export interface DeviceUsage {
  weights_bytes: number;
  kv_bytes: number;
  /** The compute buffer the total counts: the estimate after this rig's correction. */
  compute_bytes: number;
  /** The compute-buffer estimate itself, before any correction. Optional: a plan kept from a
   *  daemon older than the calibration records has none (0 after serde's default). */
  compute_estimate_bytes?: number;
  /** A GPU's context: the user's margin, or what engines measured on this rig held. */
  overhead_bytes: number;
  /** Layers whose non-expert tensors are here. */
  layers: number[];
  /** Layers whose routed experts are here. */
  expert_layers: number[];
}

export interface DevicePlan {
  spec: DeviceSpec;
  usage: DeviceUsage;
  /** How far past capacity minus reserve; 0 when it fits. */
  overflow_bytes: number;
}

export interface Plan {
  devices: DevicePlan[];
  tensor_devices: DeviceId[];
  kv_devices: DeviceId[];
  override_hits: number[];
  n_ctx: number;
  n_ctx_seq: number;
}

export interface CeilingStage {
  device: DeviceId;
  bytes_per_token: number;
  seconds_per_token: number;
}

export interface SpeedCeiling {
  tokens_per_s: number | null;
  stages: CeilingStage[];
  /** Per lent box: its link's share of each token, and the load (absent from older daemons). */
  links?: LinkCost[];
  assumptions: string[];
}

/** Rust's `Result<String, String>` as serde writes it. */
export type CommandLineResult = { Ok: string } | { Err: string };

export interface PlanReport {
  options: PlacementOptions;
  fits: boolean;
  args: string[];
  command_line: CommandLineResult;
  plan: Plan;
  ceiling: SpeedCeiling;
  problems: string[];
  notes: string[];
}

export interface ParsedCommand {
  program: string | null;
  model: string | null;
  options: PlacementOptions;
  /** Flags that do not affect placement, kept so nothing is silently lost. */
  other_args: string[];
  notes: string[];
}

export interface PlanResponse {
  model: ModelSummary;
  layers: number;
  experts: { count: number; used: number | null; shared: number | null } | null;
  rig: RigRequest;
  /** The other boxes lending devices (absent from older daemons). */
  boxes?: RemoteBox[];
  parsed: ParsedCommand | null;
  report: PlanReport;
  /** This rig's records that corrected the plan, one per device that has any (optional: an
   *  older daemon sends none). */
  calibration?: DeviceCalibration[];
}

// ---- The planner's records on this rig (crates/core/src/calibration/mod.rs) ----

/** What a record measured: llama.cpp's dry run (each term, no GPU context) or an engine's
 *  memory after load (the total, context included). */
export type CalibrationSource = 'dry_run' | 'measured';

/** The newest check of a key (`LastCheck`). */
export interface CalibrationCheck {
  source: CalibrationSource;
  at_ms: UnixMillis;
  /** The model's path or address. */
  model: string;
  /** What the planner said, before any correction. */
  estimated_bytes: number;
  observed_bytes: number;
  /** (estimated − observed) / observed in %: + = the estimate was too high; null when nothing was
   *  observed. */
  off_by_percent: number | null;
}

/** crates/placement/src/correction.rs `Correction`: what the records change on a device. */
export interface PlanCorrection {
  /** Multiplies the compute-buffer estimate (llama.cpp's figure / ours). */
  compute_factor: number;
  /** Replaces a GPU's overhead margin (measured engines); null on the CPU or with no measurement. */
  overhead_bytes: number | null;
}

/** What the records say for one (architecture, backend, device model): GET
 *  /api/v1/plan/calibration lists these, newest check first. */
export interface Calibration {
  architecture: string;
  backend: EngineBackend | (string & {});
  /** The GPU's name as NVML gives it, or `CPU` for host memory. */
  device_model: string;
  last: CalibrationCheck;
  correction: PlanCorrection;
  dry_runs: number;
  measured: number;
}

/** A device's calibration as a plan shows it. */
export interface DeviceCalibration extends Calibration {
  device: DeviceId;
}

/** Body of POST /api/v1/plan; all but `model` optional. */
export interface PlanRequest {
  model: string;
  rig?: RigRequest;
  options?: PlacementOptions;
  margins?: Margins;
  auto?: boolean;
}

/** Body of POST /api/v1/plan/dry-run: a plan's body; options left out are llama-server's defaults. */
export type DryRunRequest = Omit<PlanRequest, 'options'> & { options?: Partial<PlacementOptions> };

/** Memory in the three parts llama.cpp's dry run prints. */
export interface MemoryFigures {
  model_bytes: number;
  context_bytes: number;
  compute_bytes: number;
}

/** One line of `llama-fit-params -fitp on`'s table (whole MiB, rounded down, as bytes). */
export interface LlamaDeviceMemory extends MemoryFigures {
  /** As llama.cpp names it: `CUDA0`, `Vulkan1`, `Host` … */
  device: string;
}

/** A dry run's figures beside ours (`Figures`): ours' `compute_bytes` is after this rig's
 *  correction, `compute_estimate_bytes` before it; llama.cpp's two are its one figure. Optional:
 *  an older daemon sends none. */
export interface ComparedFigures extends MemoryFigures {
  compute_estimate_bytes?: number;
}

/** Ours against llama.cpp's, for one device (crates/core/src/dry_run.rs `DeviceComparison`). */
export interface DryRunDevice {
  /** Optional: an older daemon sends none. */
  id?: DeviceId;
  /** Our device's name. */
  device: string;
  llama_device: string;
  ours: ComparedFigures;
  llama_cpp: ComparedFigures;
}

/** POST /api/v1/plan/dry-run's answer: llama.cpp's table beside ours, or why there is none. */
export interface DryRunResponse {
  build: { id: number; version: string; backend: EngineBackend | (string & {}) } | null;
  dry_run: { devices: LlamaDeviceMemory[]; args: string[]; notes: string[] } | null;
  devices: DryRunDevice[];
  error: string | null;
  /** llama.cpp itself ran and refused the plan: llama-server would not start with these flags. */
  refused?: boolean;
}

/** Body of POST /api/v1/plan/parse. */
export interface ParseRequest {
  command: string;
  rig?: RigRequest;
  margins?: Margins;
}

// ---- Engines, launch profiles and instances (docs/api.md "Engines, launch profiles and instances") ----

export type EngineKind = 'llama.cpp' | 'ik_llama.cpp' | 'vllm' | 'sglang';
export type EngineBackend = 'cpu' | 'cuda' | 'vulkan' | 'rocm';

export interface EngineBuild {
  id: number;
  kind: EngineKind | (string & {});
  version: string;
  backend: EngineBackend | (string & {});
  cuda_architectures: string | null;
  location: string;
  capabilities: {
    version?: unknown;
    /** Booleans, and `speculative_types` (the methods in the engine's own words). */
    features?: Record<string, boolean | string[]>;
    options?: string[];
  } | null;
  source: 'built' | 'registered' | 'packaged' | (string & {});
  created_at_ms: UnixMillis;
  status: 'ready' | 'missing' | (string & {});
}

export type BuildStep = 'fetch' | 'verify' | 'extract' | 'configure' | 'compile' | 'done' | 'failed';

/** The `engine.build` event's data. */
export interface BuildProgress {
  build_id: string | number;
  step: BuildStep | (string & {});
  fraction: number | null;
  line: string | null;
}

export type RestartPolicy =
  | { policy: 'never' }
  | { policy: 'on_failure'; max_restarts: number; initial_backoff_ms: number; max_backoff_ms: number };

export interface PlannedMemory {
  gpu: number;
  bytes: number;
}

/** crates/core/src/launch/profile.rs; all but name, engine_build_id and model optional. */
export interface LaunchProfile {
  name: string;
  engine_build_id: number;
  model: string;
  placement?: PlacementOptions;
  numa_node?: number | null;
  env?: Record<string, string>;
  host?: string;
  port?: number;
  api_key?: string | null;
  reasoning?: boolean | null;
  /** llama.cpp: `--chat-template NAME` (GET /chat/templates), for a GGUF that carries none. */
  chat_template?: string | null;
  extra_args?: string[];
  restart?: RestartPolicy;
  planned_memory?: PlannedMemory[];
  autostart?: boolean;
  /** vLLM/SGLang: GPUs to split over, and the share of each GPU to preallocate (0–1). */
  tensor_parallel?: number | null;
  gpu_memory_fraction?: number | null;
  /** How the gateway serves this profile's model (all optional on input). */
  gateway?: ProfileGateway;
  /** Speculative decoding; null: off. */
  speculative?: Speculative | null;
  /** Engine knobs beyond placement (see lib/engines/engineKnobs.ts). */
  engine?: EngineSettings;
  /** vLLM/SGLang across paired rigs: this rig's interface and the followers; starts as a gang. */
  multi_node?: MultiNode | null;
  /** llama.cpp across paired rigs: the devices each lends over RPC; starts as a gang. */
  lenders?: Lender[];
}

/** crates/server/src/gang/mod.rs: a profile served by engines (and leases) on several rigs. */
export interface GangStatus {
  name: string;
  phase: 'starting' | 'ready' | 'restarting' | 'stopping' | 'stopped' | 'failed';
  /** The head first. */
  members: GangMember[];
  restarts: number;
  message: string | null;
  exposes: string;
  since_ms: number;
}

/** crates/server/src/gang/model_copies.rs: a follower's rig that lacks a gang's model. */
export interface GangModelMissing {
  rig: string;
  /** Where the head's download lands there; null when it did not come from the hub. */
  lands_at: string | null;
  /** Whether that is the profile's model path. */
  same_path: boolean;
  /** The rig's download, once started (its Downloads, or the desk's Fleet page). */
  download_id: number | null;
  /** What to do there, or why it could not be asked. */
  note: string;
}

/** GET|POST /api/v1/gangs/{name}/fetch-model */
export interface GangModelSurvey {
  model: string;
  /** The head's download of the model; null when it did not come from the hub. */
  origin: { request: { repo: string; commit: string; label: string }; within: string } | null;
  missing: GangModelMissing[];
}

/** crates/server/src/gang/member.rs */
export interface GangMember {
  kind: 'local' | 'peer' | 'lease';
  rig?: string;
  /** A lease's devices on its rig. */
  devices?: string[];
  instance: string;
  seat?: { rank: number; interface: string } & Record<string, unknown>;
}

/** crates/core/src/profiles/lenders.rs */
export interface Lender {
  rig: string;
  /** As llama.cpp names them there: CPU, CUDA0… */
  devices: string[];
}

/** crates/core/src/profiles/multi_node.rs */
export interface MultiNodeNode {
  peer: string;
  interface: string;
}

export interface MultiNode {
  interface: string;
  nodes: MultiNodeNode[];
  split?: 'pipeline' | 'tensor';
  master_port?: number;
  join_timeout_s?: number;
}

export type SpecMethod = 'draft_model' | 'mtp' | 'ngram' | 'eagle' | 'eagle3';

export interface Speculative {
  method: SpecMethod;
  tokens: number;
  draft_model?: string | null;
  min_tokens?: number | null;
  p_min?: number | null;
  ngram_match?: number | null;
}

/** Absent or null: the engine's own default. */
export interface EngineSettings {
  cpu_mask?: string | null;
  cpu_strict?: boolean;
  mlock?: boolean;
  no_mmap?: boolean;
  run_time_repack?: boolean;
  mla?: number | null;
  attn_max_batch_mib?: number | null;
  cpu_offload_gb?: number | null;
  kv_cache_dtype?: string | null;
  max_num_seqs?: number | null;
  max_num_batched_tokens?: number | null;
  block_size?: number | null;
  marlin_atomic_add?: boolean;
}

/** `GET /instances/{name}/speculation`. */
export interface SpeculationView {
  name: string;
  available: boolean;
  reason: string | null;
  drafted: number;
  accepted: number;
  drafts: number | null;
  acceptance_rate: number | null;
  mean_accepted_length: number | null;
}

/** A launch profile's gateway settings; defaults: [], false, false, null, null. */
export interface ProfileGateway {
  /** Other model names clients may ask for (e.g. "gpt-4o-mini"). */
  aliases?: string[];
  /** Started by the gateway when a request names it. */
  on_demand?: boolean;
  /** Never stopped to make room for another model. */
  pinned?: boolean;
  /** Stopped after this long without a request; null: never. */
  idle_ttl_s?: number | null;
  /** Requests served at once, more are refused with 429; null: unlimited. */
  max_concurrent?: number | null;
}

/** A profile as sent to be created: the placement may be partial (the rest takes defaults). */
export type NewProfile = Omit<LaunchProfile, 'placement'> & { placement?: Partial<PlacementOptions> };

export interface SavedProfile {
  profile: LaunchProfile;
  warnings: string[];
  argv: string[] | null;
  /** Shows `--port <chosen at start>` when the profile picks a free port at each start. */
  command_line: string | null;
  build_missing: boolean;
  /** A multi-node profile: which interfaces carry its unencrypted engine traffic. */
  exposes?: string | null;
}

export type InstancePhase = 'starting' | 'loading' | 'ready' | 'stopping' | 'stopped' | 'crashed';

export type CauseKind =
  | 'out_of_gpu_memory'
  | 'port_in_use'
  | 'unknown_architecture'
  | 'missing_file'
  | 'exited_immediately'
  | 'never_healthy'
  | 'killed'
  | 'other';

export interface InstanceView {
  name: string;
  phase: InstancePhase | (string & {});
  progress?: number | null;
  exit_code?: number | null;
  signal?: number | null;
  cause?: ({ kind: CauseKind | (string & {}) } & Record<string, unknown>) | null;
  explanation?: string | null;
  last_lines?: string[];
  restart?: { attempt: number; at_ms: UnixMillis } | null;
  attempt?: number;
  pid: number | null;
  started_at_ms: UnixMillis | null;
  ready_at_ms?: UnixMillis | null;
  since_ms?: UnixMillis | null;
  host: string;
  port: number | null;
  uptime_ms: number | null;
  adopted?: boolean;
  planned_memory: PlannedMemory[];
  measured_memory: { gpu: number; pid: number; bytes: number }[];
  argv?: string[];
  /** `argv` as one shell-quoted line, with the port this run really listens on. */
  command_line?: string | null;
}

/** The `instance.log` event's data and one line of GET /instances/{name}/logs. */
export interface LogLine {
  name?: string;
  seq: number;
  at_ms: UnixMillis;
  stream: 'stdout' | 'stderr' | (string & {});
  text: string;
}

/** The backends Rigdeck builds llama.cpp for from the UI. */
export type BuildBackend = 'cpu' | 'cuda' | 'vulkan';

/** The engines installed from a package index with pip (rather than built). */
export type PythonEngineKind = 'vllm' | 'sglang';

export type SourceEngineKind = 'llama.cpp' | 'ik_llama.cpp';

/** `GET /api/v1/engines/versions?kind=…[&index_url=…]`. */
export interface EngineVersions {
  kind: EngineKind | (string & {});
  /** The package on the index: `vllm`, or `llama-cpp-python` (the package llama.cpp's source
   *  comes in). */
  package: string;
  /** The final releases the package index serves, newest first (may be empty). */
  versions: string[];
  /** vLLM/SGLang: what an install without a version takes (the newest listed, else the pinned
   *  fallback); llama.cpp/ik_llama.cpp: the bundled source's version. */
  default: string | null;
  /** The bundled source's version (llama.cpp, ik_llama.cpp); null for vLLM and SGLang. */
  pinned: string | null;
  /** The releases the installed builds of this kind came from, newest first. */
  installed: string[];
  /** Releases newer than the bundled source and every installed build, newest first. */
  newer: string[];
}

/** `POST /api/v1/engines/install`'s body; without `version` the newest release on the index,
 *  without `index_url` pip's own index, else PyPI. */
export interface EngineInstall {
  kind: PythonEngineKind;
  version?: string;
  index_url?: string;
}


// ---- Model hub and downloads (docs/api.md "Model hub and downloads") ----

/** One candidate of `GET /api/v1/hub/recommended`, planned on the live rig
 *  (crates/core/src/hub_recommend.rs `Recommendation`). */
export interface RecommendedModel {
  repo: string;
  /** The quantization to run: the catalog's when it fits, else the repository's that fits best. */
  quant: string;
  kind: 'dense' | 'moe' | (string & {});
  params: string;
  fits: boolean;
  verdict: FitVerdict | null;
  summary: string;
  total_bytes: number;
  tokens_per_s: number | null;
  /** Why the catalog lists it. */
  why: string;
  /** Why this quantization was chosen. */
  choice: string;
}

/** `GET /api/v1/hub/recommended?context=N`: the catalog ranked for this rig, best first; what
 *  does not fit last. `offline`: the hub could not be reached (`message` says so, `models` empty). */
export interface RecommendedModels {
  context: number;
  offline: boolean;
  message: string | null;
  about: string;
  models: RecommendedModel[];
  /** Candidates whose repository could not be read, with why. */
  left_out: { repo: string; reason: string }[];
}

export type HubFormat = 'gguf' | 'safetensors';
export type HubSort = 'downloads' | 'likes' | 'updated';

/** GET /hub/search's parameters; no format means any. */
export interface HubSearchQuery {
  text: string;
  format?: HubFormat | null;
  sort?: HubSort;
  limit?: number;
}

/** A search hit, and the summary on a model's page (crates/hub/src/api/models.rs). */
export interface HubModelSummary {
  /** `org/name`. */
  id: string;
  downloads: number;
  likes: number;
  /** ISO 8601, as the hub writes it. */
  last_modified: string | null;
  pipeline_tag: string | null;
  tags: string[];
  /** Terms must be accepted on the hub before the files can be read. */
  gated: boolean;
}

/** The hub's own reading of a GGUF repository. */
export interface HubGgufInfo {
  total: number | null;
  architecture: string | null;
  context_length: number | null;
}

export interface HubModelInfo {
  summary: HubModelSummary;
  /** The commit the revision resolved to (40 hex digits). */
  commit: string;
  private: boolean;
  gguf: HubGgufInfo | null;
  page_url: string;
}

export interface HubFile {
  path: string;
  size_bytes: number;
  git_oid: string;
  lfs_sha256: string | null;
}

/** Parts of a split GGUF the listing lacks; ranges of 1-based part numbers, inclusive. */
export interface MissingParts {
  prefix: string;
  count: number;
  ranges: [number, number][];
}

export type FileGroupKind = 'gguf' | 'projector' | 'safetensors' | 'other';

/** Files a user downloads together: one quantization (all shards of a split one), a vision
 *  projector, the safetensors weights, or one other file. */
export interface FileGroup {
  kind: FileGroupKind | (string & {});
  /** "Q4_K_M", "UD-IQ2_M", "mmproj-F16", "safetensors", or the file name. Unique in a listing. */
  label: string;
  files: HubFile[];
  total_bytes: number;
  /** Set for an incomplete split upload: it cannot be loaded, so it is not offered. */
  missing: MissingParts | null;
}

/** GET /hub/models/{owner}/{name}. */
export interface HubModelPage {
  model: HubModelInfo;
  revision: string;
  /** GGUF quantizations first, ascending by size. */
  groups: FileGroup[];
  /** Listing entries refused (unsafe paths and the like), each with why. */
  refused: string[];
}

export interface HubCard {
  commit: string;
  /** The README as the hub serves it: untrusted, rendered through lib/hub/markdown. */
  markdown: string;
}

/** crates/placement/src/verdict.rs `FitVerdict` (`#[serde(tag = "kind")]`). */
export type FitVerdict =
  | { kind: 'on_gpus'; gpus: number }
  | { kind: 'experts_in_ram'; layers: number }
  | { kind: 'layers_in_ram'; layers: number }
  | { kind: 'cpu_only' }
  | { kind: 'does_not_fit'; short_bytes: number };

export interface DeviceFit {
  name: string;
  used_bytes: number;
  capacity_bytes: number;
  /** What the planner kept back of the capacity. */
  reserve_bytes: number;
}

/** One quantization planned on the rig from its headers (crates/core/src/hub_fit.rs). */
export interface QuantFit {
  label: string;
  total_bytes: number;
  /** null when the header could not be read (`error` says why). */
  verdict: FitVerdict | null;
  summary: string;
  devices: DeviceFit[];
  tokens_per_s: number | null;
  command_line: string | null;
  error: string | null;
  recommended: boolean;
}

/** Body of POST /hub/fit. */
export interface FitRequest {
  repo: string;
  revision?: string;
  /** `live` or a preset id from GET /rigs. */
  rig: string;
  context: number;
}

export interface FitResponse {
  commit: string;
  rig: string;
  context: number;
  quants: QuantFit[];
}

/** Whether a Hugging Face token is set and where from; never the token. */
export interface HubTokenStatus {
  present: boolean;
  source: 'HF_TOKEN' | 'rigdeck' | 'HF_HOME/token' | (string & {}) | null;
}

export type DownloadState = 'queued' | 'running' | 'paused' | 'failed' | 'done' | 'cancelled';

export interface DownloadProgress {
  total_bytes: number;
  done_bytes: number;
  files_total: number;
  files_done: number;
  /** The file being transferred. */
  current: string;
  /** Bytes per second over the last few seconds. */
  rate_bps: number;
  /** Seconds left at that rate; null before a rate is known. */
  eta_s: number | null;
}

/** crates/core/src/downloads `DownloadView`. */
export interface DownloadView {
  id: number;
  repo: string;
  revision: string;
  /** The quantization, or "all files". */
  label: string;
  files: number;
  state: DownloadState | (string & {});
  error: string | null;
  progress: DownloadProgress;
  /** Absolute path of each file once done (empty for one finished before the daemon restarted). */
  paths: string[];
  created_ms: UnixMillis;
}

/** Body of POST /downloads; no quant: the only GGUF quantization, or every file of a repository
 *  without GGUF. */
export interface NewDownload {
  repo: string;
  quant?: string;
  revision?: string;
}

export type DownloadAction = 'pause' | 'resume' | 'cancel' | 'retry';

// ---- The Hugging Face cache: housekeeping (crates/hub/src/cache/inventory.rs, download/verify.rs) ----

export interface CachedFile {
  /** The path in the repository. */
  path: string;
  /** The blob the snapshot's link points to: shared by snapshots that have the same file. */
  blob: string;
  size_bytes: number;
}

/** One snapshot (a commit) of a cached model. */
export interface CachedSnapshot {
  /** 40 hex digits. */
  commit: string;
  /** Branches or tags that name this commit ("main"). */
  refs: string[];
  files: CachedFile[];
}

export interface CachedModel {
  /** `org/name`. */
  repo: string;
  /** The model's folder in the cache (`models--org--name`). */
  dir: string;
  snapshots: CachedSnapshot[];
  /** Bytes of its blobs, each counted once however many snapshots share it. */
  size_on_disk: number;
}

/** GET /hub/cache. */
export interface HubCacheListing {
  cache_dir: string;
  models: CachedModel[];
}

/** DELETE /hub/cache/{owner}/{name}: what removing a model (or one snapshot) freed. */
export interface CacheRemoved {
  freed_bytes: number;
  blobs_removed: number;
  /** Blobs kept because another snapshot still links to them. */
  blobs_kept: number;
}

export interface CheckedFile {
  path: string;
  ok: boolean;
  /** What is wrong: a different hash, a file that cannot be read. */
  problem: string | null;
}

/** POST /hub/cache/{owner}/{name}/verify. */
export interface CacheVerification {
  /** The snapshot checked. */
  commit: string;
  files: CheckedFile[];
  /** Set when the hub's branch points to another commit now: a newer version exists. */
  upstream_commit: string | null;
}

// ---- The gateway: the OpenAI-compatible endpoint, its API keys and usage ----

/** GET /keys, and inside POST /keys. Revoked keys stay listed. */
export interface ApiKeyView {
  id: number;
  name: string;
  /** The first characters of the secret, e.g. "rdk-3f9a1c", to tell keys apart. */
  prefix: string;
  created_at_ms: UnixMillis;
  last_used_at_ms: UnixMillis | null;
  revoked_at_ms: UnixMillis | null;
}

/** POST /keys (201): the secret is in this answer only. */
export interface CreatedApiKey {
  key: ApiKeyView;
  secret: string;
}

export type GatewayModelState = 'ready' | 'loading' | 'starting' | 'stopped' | 'stopping' | 'crashed';

export interface GatewayModel {
  name: string;
  aliases: string[];
  state: GatewayModelState | (string & {});
  /** 0..1 while loading. */
  progress: number | null;
  on_demand: boolean;
  pinned: boolean;
  idle_ttl_s: number | null;
  max_concurrent: number | null;
  in_flight: number;
  last_used_at_ms: UnixMillis | null;
  /** The GPUs its profile places it on (the daemon sends it; not in the first contract). */
  gpus?: number[];
  /** Its last reply since it started, with the decode speed; null before the first. */
  last_reply?: GatewayLastReply | null;
}

/** A model's last reply since it started (GatewayModel.last_reply). */
export interface GatewayLastReply {
  at_ms: UnixMillis;
  /** Tokens per second while the reply was generated. */
  decode_tps: number;
  completion_tokens: number | null;
}

/** A model stopped to make room for another, or for being idle. */
export interface GatewayEviction {
  at_ms: UnixMillis;
  evicted: string;
  /** The model that needed the room; empty for an idle stop. */
  for_model: string;
  reason: string;
}

/** GET /gateway. */
export interface GatewayView {
  base_url: string;
  models: GatewayModel[];
  evictions: GatewayEviction[];
}

export interface UsageCounts {
  requests: number;
  errors: number;
  prompt_tokens: number;
  completion_tokens: number;
}

export interface ModelUsage extends UsageCounts {
  model: string;
  median_ttft_ms: number | null;
  median_decode_tps: number | null;
}

export interface KeyUsage extends UsageCounts {
  /** null: requests without a key (or with one since deleted). */
  key_id: number | null;
  key_name: string;
}

export interface UsagePoint {
  /** Start of the bucket. */
  t: UnixMillis;
  model: string;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
}

export type RequestStatus = 'ok' | 'error' | 'cancelled' | 'engine_error' | 'refused' | 'rate_limited';

export interface RecentRequest {
  at_ms: UnixMillis;
  model: string;
  key_name: string;
  route: string;
  stream: boolean;
  status: RequestStatus | (string & {});
  http_status: number;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  ttft_ms: number | null;
  decode_tps: number | null;
  duration_ms: number;
  error: string | null;
  /** The paired rig that answered (null: this daemon's own engine, or nobody). */
  rig?: string | null;
}

/** GET /gateway/usage?from_ms=&to_ms=. */
export interface GatewayUsage {
  totals: UsageCounts;
  by_model: ModelUsage[];
  by_key: KeyUsage[];
  series: { bucket_ms: number; points: UsagePoint[] };
  recent: RecentRequest[];
}

// ---- Chat: conversations with the gateway's models (crates/chat) ----

export type ChatModelState = 'ready' | 'loading' | 'stopped' | 'stopping' | 'crashed';

/** GET /chat/models: running instances and startable profiles. */
export interface ChatModel {
  name: string;
  aliases: string[];
  state: ChatModelState | (string & {});
  /** Started by the gateway when a request names it. */
  on_demand: boolean;
  /** The instance's real context size in tokens; null when unknown. */
  context: number | null;
  /** Takes images. */
  vision: boolean;
  /** The reply length a conversation without max_tokens gets (absent from older daemons). */
  default_max_tokens?: number;
  /** The profile's GGUF carries no chat template and the profile names none. */
  no_chat_template?: boolean;
  /** The architecture's own template, to name in the profile then. */
  suggested_chat_template?: string | null;
}

/** GET /chat/templates: the names a profile's chat_template may take (llama-server's built-in
 *  templates), and each architecture's own. */
export interface ChatTemplates {
  names: string[];
  by_architecture: Record<string, string>;
}

export type ReasoningMode = 'on' | 'off';
export type ReasoningEffort = 'low' | 'medium' | 'high';

/** Sampling and reasoning, sent with every reply; a missing or null value is the engine's default. */
export interface ChatParams {
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  min_p?: number | null;
  max_tokens?: number | null;
  /** null: the model's default. */
  reasoning?: ReasoningMode | null;
  reasoning_effort?: ReasoningEffort | null;
}

export interface Conversation {
  id: number;
  title: string;
  /** The gateway model (a profile name or alias). */
  model: string;
  system_prompt: string;
  params: ChatParams;
  /** The message whose branch is shown; null: the newest leaf. */
  active_leaf: number | null;
  created_at_ms: UnixMillis;
  updated_at_ms: UnixMillis;
}

/** GET /chat/conversations?q=: newest first. */
export interface ConversationSummary {
  id: number;
  title: string;
  model: string;
  created_at_ms: UnixMillis;
  updated_at_ms: UnixMillis;
  /** A matching excerpt when searched. */
  snippet: string | null;
}

export type MessageStatus = 'complete' | 'streaming' | 'stopped' | 'error' | 'interrupted';

export interface MessageStats {
  ttft_ms: number | null;
  prompt_tps: number | null;
  decode_tps: number | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  duration_ms: number | null;
  /** How long the model reasoned before it answered, where the daemon reports it. */
  reasoning_ms?: number | null;
  /** The engine's finish reason ('stop', 'length', …); null for a reply that was stopped. */
  finish_reason?: string | null;
  /** The reply length it was written under. */
  max_tokens?: number | null;
}

export interface ChatMessage {
  id: number;
  conversation_id: number;
  parent_id: number | null;
  role: 'user' | 'assistant';
  content: string;
  reasoning: string;
  /** data: URLs. */
  images: string[];
  model: string | null;
  status: MessageStatus | (string & {});
  error: string | null;
  stats: MessageStats;
  created_at_ms: UnixMillis;
}

/** GET /chat/conversations/{id}: every message of every branch. */
export interface ConversationDetail {
  conversation: Conversation;
  messages: ChatMessage[];
}

export interface NewConversation {
  model: string;
  title?: string;
  system_prompt?: string;
  params?: ChatParams;
}

export interface ConversationPatch {
  title?: string;
  model?: string;
  system_prompt?: string;
  params?: ChatParams;
  active_leaf?: number | null;
}

export interface NewChatMessage {
  /** null: a first message (or an edit of one). */
  parent_id: number | null;
  content: string;
  images?: string[];
}

/** `chat.delta`: text to append to a reply at these offsets (UTF-16 units, a JS string's
 *  length). A copy of another length missed some: refetch. */
export interface ChatDelta {
  conversation_id: number;
  message_id: number;
  content_offset: number;
  content: string;
  reasoning_offset: number;
  reasoning: string;
  completion_tokens: number;
  elapsed_ms: number;
  /** Progress while the model loads ("loading model x.gguf on GPU 2–3, 40 % (12 s)"). */
  status_line: string | null;
}

// ---- Running a model in one click (docs/api.md "Model runs") ----

/** What to run: a hub quantization (the best fit when none is named), a file, or a profile. */
export type RunSource =
  | { kind: 'hub'; repo: string; quant?: string | null; revision?: string | null }
  | { kind: 'file'; path: string }
  | { kind: 'profile'; name: string };

export type RunStep = 'checking' | 'downloading' | 'planning' | 'starting' | 'loading' | 'ready' | 'failed';

/** One "run this model" request as the daemon follows it (`GET /api/v1/model-runs/{id}`). */
export interface ModelRun {
  id: number;
  source: RunSource;
  title: string;
  step: RunStep;
  /** 0–1 within the step, where it is known (a download, a model load). */
  progress: number | null;
  /** The step in words. */
  detail: string;
  download_id: number | null;
  profile: string | null;
  created_profile: boolean;
  /** The chat's and the gateway's name for it, once ready. */
  model: string | null;
  placement: string | null;
  error: string | null;
  /** The quantization that fits, when the one asked for does not. */
  fix: { repo: string; quant: string; summary: string } | null;
  notes: string[];
  started_ms: number;
  ended_ms: number | null;
}
