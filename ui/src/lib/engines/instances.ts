// Pure helpers for the Instances page and the "Save as launch profile" form: state labels, uptime,
// planned-vs-measured memory rows, the build-progress reducer and the profile body from the editor.

import type {
  BuildBackend,
  BuildProgress,
  EngineBuild,
  EnginesAtStart,
  GpuSnapshot,
  InstanceView,
  SpeculationView,
  LaunchProfile,
  NewProfile,
  LogLine,
  GangMember,
  GangStatus,
  Lender,
  MultiNodeNode,
  PlacementOptions,
  PlanResponse,
  PlannedMemory,
} from '../api/types';

export type Tone = 'ok' | 'warn' | 'bad' | 'info' | 'muted';

const PHASES: Record<string, { label: string; tone: Tone }> = {
  starting: { label: 'starting', tone: 'info' },
  loading: { label: 'loading', tone: 'info' },
  ready: { label: 'ready', tone: 'ok' },
  stopping: { label: 'stopping', tone: 'warn' },
  stopped: { label: 'stopped', tone: 'muted' },
  crashed: { label: 'crashed', tone: 'bad' },
};

/** The state chip's text: loading shows its progress ("loading 40%"). */
export function phaseLabel(v: Pick<InstanceView, 'phase' | 'progress'>): string {
  const base = PHASES[v.phase]?.label ?? v.phase;
  if (v.phase === 'loading' && typeof v.progress === 'number' && Number.isFinite(v.progress)) {
    return `${base} ${Math.round(Math.min(1, Math.max(0, v.progress)) * 100)}%`;
  }
  return base;
}

export function phaseTone(phase: string): Tone {
  return PHASES[phase]?.tone ?? 'muted';
}

/** Running means it holds (or will hold) a process: stop and restart apply. */
export function isRunning(phase: string): boolean {
  return phase === 'starting' || phase === 'loading' || phase === 'ready';
}

const CAUSES: Record<string, string> = {
  out_of_gpu_memory: 'out of GPU memory',
  port_in_use: 'port in use',
  unknown_architecture: 'unknown model architecture',
  missing_file: 'missing file',
  exited_immediately: 'exited at once',
  never_healthy: 'never became healthy',
  killed: 'killed',
  other: 'other',
};

export function causeLabel(kind: string | null | undefined): string {
  if (!kind) return 'unknown cause';
  return CAUSES[kind] ?? kind.replace(/_/g, ' ');
}

/** "42s", "5m 03s", "3h 07m", "2d 4h". Null (not running) shows as a dash. */
export function formatUptime(ms: number | null | undefined): string {
  if (ms == null || !Number.isFinite(ms) || ms < 0) return '—';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h}h ${String(m % 60).padStart(2, '0')}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** Uptime as the view says it, advanced by the time since the view arrived while it is running. */
export function liveUptime(v: Pick<InstanceView, 'uptime_ms' | 'phase'>, receivedAtMs: number, nowMs: number): number | null {
  if (v.uptime_ms == null) return null;
  return isRunning(v.phase) ? v.uptime_ms + Math.max(0, nowMs - receivedAtMs) : v.uptime_ms;
}

/** The engine's own address: loopback-bound engines are reached at the page's host name only when
 *  the page is on the same machine, so a wildcard bind shows the page's host. */
export function endpointUrl(v: Pick<InstanceView, 'host' | 'port'>, pageHost = '127.0.0.1'): string | null {
  if (!v.port) return null;
  let host = v.host || '127.0.0.1';
  if (host === '0.0.0.0' || host === '::') host = pageHost;
  if (host.includes(':') && !host.startsWith('[')) host = `[${host}]`;
  return `http://${host}:${v.port}/`;
}

export interface MemoryRow {
  gpu: number;
  planned: number | null;
  measured: number | null;
  /** measured − planned when both are known. */
  delta: number | null;
}

/** One row per GPU that has a plan or a measurement, by index; measurements of several pids on one
 *  GPU are added up. */
export function memoryRows(v: Pick<InstanceView, 'planned_memory' | 'measured_memory'>): MemoryRow[] {
  const rows = new Map<number, MemoryRow>();
  const row = (gpu: number) => {
    let r = rows.get(gpu);
    if (!r) rows.set(gpu, (r = { gpu, planned: null, measured: null, delta: null }));
    return r;
  };
  for (const p of v.planned_memory ?? []) row(p.gpu).planned = (row(p.gpu).planned ?? 0) + p.bytes;
  for (const m of v.measured_memory ?? []) row(m.gpu).measured = (row(m.gpu).measured ?? 0) + m.bytes;
  const out = [...rows.values()].sort((a, b) => a.gpu - b.gpu);
  for (const r of out) r.delta = r.planned != null && r.measured != null ? r.measured - r.planned : null;
  return out;
}

// ---- Build progress ----

export interface BuildState {
  buildId: string | number | null;
  step: string | null;
  fraction: number | null;
  /** The most recent output line. */
  line: string | null;
  /** The last lines (kept for a failure). */
  lines: string[];
  done: boolean;
  failed: boolean;
}

export const BUILD_LINES_KEPT = 40;

export function emptyBuild(): BuildState {
  return { buildId: null, step: null, fraction: null, line: null, lines: [], done: false, failed: false };
}

/** Folds one `engine.build` event into the state; a new build id starts over. */
export function reduceBuild(s: BuildState, e: BuildProgress): BuildState {
  const base = s.buildId != null && e.build_id !== s.buildId ? emptyBuild() : s;
  const lines = e.line ? [...base.lines, e.line].slice(-BUILD_LINES_KEPT) : base.lines;
  const fraction =
    e.step === 'done' ? 1 : typeof e.fraction === 'number' && Number.isFinite(e.fraction) ? Math.min(1, Math.max(0, e.fraction)) : base.fraction;
  return {
    buildId: e.build_id,
    step: e.step,
    fraction,
    line: e.line ?? base.line,
    lines,
    done: e.step === 'done',
    failed: e.step === 'failed',
  };
}

export function buildActive(s: BuildState): boolean {
  return s.step != null && !s.done && !s.failed;
}

// ---- Logs ----

/** Appends lines in seq order without duplicates, keeping the last `keep`. */
export function mergeLogs(have: LogLine[], more: LogLine[], keep = 500): LogLine[] {
  const last = have.at(-1)?.seq ?? -Infinity;
  const fresh = more.filter((l) => l.seq > last).sort((a, b) => a.seq - b.seq);
  if (fresh.length === 0) return have;
  return [...have, ...fresh].slice(-keep);
}

// ---- Profile from the placement editor ----

export interface ProfileForm {
  name: string;
  engineBuildId: number | null;
  /** Empty: a free port at each start. */
  port: string;
  /** llama.cpp across boxes: paired rigs lending devices over RPC, one "rig DEVICE,DEVICE" a line. */
  lenders?: string;
}

/** The lenders of a profile form, one "rig DEVICE[,DEVICE…]" a line; a problem for the first bad one. */
function lenderLines(text: string): { lenders: Lender[]; problem: string | null } {
  const lenders: Lender[] = [];
  for (const line of text.split('\n').map((l) => l.trim()).filter(Boolean)) {
    const [rig, devices, ...rest] = line.split(/\s+/);
    if (!rig || !devices || rest.length > 0) {
      return { lenders, problem: `"${line}": give the rig's fleet name and the devices it lends, e.g. "${rig || 'mini'} CPU" or "${rig || 'mini'} CUDA0,CUDA1".` };
    }
    const names = devices.split(',').filter(Boolean);
    if (names.length === 0 || names.some((d) => !/^[A-Za-z0-9_]{1,32}$/.test(d))) {
      return { lenders, problem: `"${devices}" on '${rig}' is not a list of llama.cpp device names (CPU, CUDA0, Vulkan1…), comma-separated.` };
    }
    if (lenders.some((l) => l.rig === rig)) return { lenders, problem: `'${rig}' is listed twice: give all its devices on one line.` };
    lenders.push({ rig, devices: names });
  }
  return { lenders, problem: null };
}

/** Checks the form; null when it can be sent. */
export function profileFormError(f: ProfileForm): string | null {
  if (!f.name.trim()) return 'Give the profile a name.';
  if (f.engineBuildId == null) return 'Pick an engine build.';
  const p = f.port.trim();
  if (p && !(/^\d+$/.test(p) && Number(p) >= 1 && Number(p) <= 65535)) return 'The port is a number from 1 to 65535, or empty for a free one.';
  return lenderLines(f.lenders ?? '').problem;
}

/** Planned memory per GPU from the plan: weights + KV + compute + overhead of each GPU column. */
export function plannedMemoryFromPlan(res: PlanResponse | null): PlannedMemory[] {
  if (!res) return [];
  const out: PlannedMemory[] = [];
  for (const d of res.report.plan.devices) {
    if (d.spec.id.kind !== 'gpu') continue;
    const u = d.usage;
    const bytes = u.weights_bytes + u.kv_bytes + u.compute_bytes + u.overhead_bytes;
    if (bytes > 0) out.push({ gpu: d.spec.id.index, bytes });
  }
  return out;
}

/** The POST /api/v1/profiles body from the editor's model, options and plan. Planned memory is
 *  sent only for a live-rig plan (a preset's columns are not this machine's GPUs) and a GPU build
 *  (a CPU engine holds no VRAM, so admission must not count any). */
export function profileBody(
  f: ProfileForm,
  model: string,
  options: PlacementOptions,
  plan: PlanResponse | null,
  rig: string,
  backend: string | null,
): LaunchProfile {
  const body: LaunchProfile = {
    name: f.name.trim(),
    engine_build_id: f.engineBuildId ?? 0,
    model,
    placement: options,
  };
  const p = f.port.trim();
  if (p) body.port = Number(p);
  const { lenders } = lenderLines(f.lenders ?? '');
  if (lenders.length > 0) body.lenders = lenders;
  if (rig === 'live' && backend != null && backend !== 'cpu') {
    const planned = plannedMemoryFromPlan(plan);
    if (planned.length > 0) body.planned_memory = planned;
  }
  return body;
}

/** Whether an engine's argv is a gang head's (llama.cpp with lent devices, or a multi-node
 *  vLLM/SGLang head): only those ask for their gang. */
export function mayHeadGang(argv: string[]): boolean {
  return argv.includes('--rpc') || argv.includes('--nnodes');
}

/** A gang's lines for its head's card: its phase, restarts and members with their rigs, then
 *  why it fails, restarts or waits. */
export function gangLines(g: GangStatus): string[] {
  const member = (m: GangMember): string => {
    if (m.kind === 'lease') return `${(m.devices ?? []).join(',')} lent by '${m.rig}'`;
    const place = m.kind === 'local' ? 'this rig' : `'${m.rig}'`;
    return m.seat ? `rank ${m.seat.rank} on ${place} (${m.seat.interface})` : `the head on ${place}`;
  };
  const restarts = g.restarts > 0 ? ` (${g.restarts} restart${g.restarts === 1 ? '' : 's'})` : '';
  const lines = [`gang ${g.phase}${restarts}: ${g.members.map(member).join(' · ')}`];
  if (g.message) lines.push(g.message);
  return lines;
}

/** What the Models page's "Serve" form holds for a vLLM or SGLang profile. */
export interface ServeForm {
  name: string;
  buildId: number | null;
  /** 0: the model's own context length. */
  context: number;
  tensorParallel: number;
  /** Share of each GPU to preallocate, 0–1. */
  gpuShare: number;
  /** NVML indices, comma-separated ("0,1"); empty: all GPUs. */
  gpus: string;
  /** Across boxes: this rig's network interface for the engine's traffic (empty: one box). */
  iface: string;
  /** Across boxes: one follower a line, "RIG INTERFACE" (a paired rig's fleet name). */
  followers: string;
}

/** The followers of a serve form, one "rig interface" a line; a problem for the first bad one. */
function followerNodes(text: string): { nodes: MultiNodeNode[]; problem: string | null } {
  const nodes: MultiNodeNode[] = [];
  for (const line of text.split('\n').map((l) => l.trim()).filter(Boolean)) {
    const [peer, iface, ...rest] = line.split(/\s+/);
    if (!peer || !iface || rest.length > 0) {
      return { nodes, problem: `"${line}": give the rig's fleet name and its interface, e.g. "mini eth1".` };
    }
    if (nodes.some((n) => n.peer === peer)) return { nodes, problem: `'${peer}' is listed twice: each box joins once.` };
    nodes.push({ peer, interface: iface });
  }
  return { nodes, problem: null };
}

/** The form's first problem, or null when it can be saved. */
export function serveFormError(f: ServeForm, gpuCount: number): string | null {
  if (!f.name.trim()) return 'Give the profile a name.';
  if (f.buildId == null) return 'Choose a vLLM or SGLang environment (install one on the Engines page).';
  if (!Number.isInteger(f.context) || f.context < 0) return 'Context must be a whole number of tokens (0: the model’s own).';
  if (!Number.isInteger(f.tensorParallel) || f.tensorParallel < 1) return 'Tensor parallel must be 1 or more GPUs.';
  if (!(f.gpuShare > 0 && f.gpuShare <= 1)) return 'The GPU share must be between 0 and 1 (0.9 = 90 % of each GPU).';
  const gpus = gpuList(f.gpus);
  if (gpus.some((g) => !/^\d+$/.test(g) || Number(g) >= Math.max(gpuCount, 1))) {
    return `GPUs are indices from 0 to ${Math.max(gpuCount, 1) - 1}, comma-separated.`;
  }
  const available = gpus.length > 0 ? gpus.length : gpuCount;
  if (gpuCount > 0 && f.tensorParallel > available) {
    return `Tensor parallel ${f.tensorParallel} needs that many GPUs; ${available} ${available === 1 ? 'is' : 'are'} chosen.`;
  }
  const { nodes, problem } = followerNodes(f.followers);
  if (problem) return problem;
  if (nodes.length > 0 && !f.iface.trim()) return "Give this rig's interface for the traffic between the boxes (e.g. eth1).";
  if (f.iface.trim() && nodes.length === 0) return 'Across boxes needs at least one follower: one "rig interface" a line.';
  return null;
}

function gpuList(text: string): string[] {
  return text
    .split(',')
    .map((g) => g.trim())
    .filter(Boolean);
}

/** The profile a "Serve" form makes: the chosen GPUs in NVML (PCI bus) order for CUDA. */
export function serveProfileBody(f: ServeForm, model: string): NewProfile {
  const body: NewProfile = {
    name: f.name.trim(),
    engine_build_id: f.buildId ?? 0,
    model,
    placement: { context: f.context },
    gpu_memory_fraction: f.gpuShare,
  };
  if (f.tensorParallel > 1) body.tensor_parallel = f.tensorParallel;
  const gpus = gpuList(f.gpus);
  if (gpus.length > 0) body.env = { CUDA_VISIBLE_DEVICES: gpus.join(','), CUDA_DEVICE_ORDER: 'PCI_BUS_ID' };
  const { nodes } = followerNodes(f.followers);
  if (nodes.length > 0) body.multi_node = { interface: f.iface.trim(), nodes };
  return body;
}

/** A profile name suggested from the model file: "Qwen3-8B-Q4_K_M.gguf" → "qwen3-8b-q4_k_m";
 *  a split model's shard suffix is dropped. */
export function defaultProfileName(model: string): string {
  const base = model.split(/[\\/]/).pop() ?? '';
  return base
    .replace(/\.gguf$/i, '')
    .replace(/-\d{5}-of-\d{5}$/i, '')
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

export interface StartLine {
  tone: Tone;
  text: string;
}

/** What the daemon did about engines as it started, one line per outcome; empty when nothing
 *  was recovered and no profile is marked autostart. */
export function startReportLines(r: EnginesAtStart | null | undefined): StartLine[] {
  if (!r) return [];
  const lines: StartLine[] = [];
  const names = (list: string[]) => list.join(', ');
  const { recovery, autostart } = r;
  if (recovery.adopted.length) {
    lines.push({ tone: 'info', text: `Still running from the last run, taken over: ${names(recovery.adopted)}` });
  }
  if (recovery.cleaned_up.length) {
    lines.push({ tone: 'info', text: `Stopped, left over from the last run: ${names(recovery.cleaned_up)}` });
  }
  for (const [name, why] of recovery.failed) {
    lines.push({ tone: 'bad', text: `Could not stop ${name}, left over from the last run: ${why}` });
  }
  if (autostart.started.length) {
    lines.push({ tone: 'ok', text: `Started automatically: ${names(autostart.started)}` });
  }
  if (autostart.already_running.length) {
    lines.push({ tone: 'info', text: `Autostart: already running: ${names(autostart.already_running)}` });
  }
  for (const [name, why] of autostart.skipped) {
    lines.push({ tone: 'warn', text: `Autostart skipped ${name}: ${why}` });
  }
  if (autostart.refused) lines.push({ tone: 'bad', text: autostart.refused });
  return lines;
}

/** The compute capabilities of the GPUs the daemon sees ("8.6", "12.0"), each once, sorted:
 *  what a CUDA build from the UI is compiled for. */
export function gpuComputeCapabilities(gpus: GpuSnapshot[] | undefined): string[] {
  const seen = new Set<string>();
  const caps: [number, number][] = [];
  for (const g of gpus ?? []) {
    const c = g.compute_capability;
    if (!c || c.major <= 0) continue;
    const key = `${c.major}.${c.minor}`;
    if (!seen.has(key)) {
      seen.add(key);
      caps.push([c.major, c.minor]);
    }
  }
  caps.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  return caps.map(([major, minor]) => `${major}.${minor}`);
}

/** CUDA where NVIDIA GPUs are seen (what such a rig wants), else the CPU. */
export function defaultBackend(capabilities: string[]): BuildBackend {
  return capabilities.length > 0 ? 'cuda' : 'cpu';
}

export const BACKEND_LABELS: Record<BuildBackend, string> = { cpu: 'CPU', cuda: 'CUDA', vulkan: 'Vulkan' };

/**
 * Whether to offer a CUDA build: NVIDIA GPUs are seen and no llama.cpp-family build that works
 * uses them (a fresh install from a package has only its CPU engine).
 */
export function offersGpuBuild(builds: EngineBuild[], capabilities: string[]): boolean {
  return (
    capabilities.length > 0 &&
    !builds.some((b) => b.status === 'ready' && b.backend === 'cuda' && (b.kind === 'llama.cpp' || b.kind === 'ik_llama.cpp'))
  );
}


/** Flags that turn speculative decoding on, in each engine's words. */
const SPECULATIVE_FLAGS = [
  '--spec-type',
  '-md',
  '--model-draft',
  '--spec-draft-model',
  '-mtp',
  '--multi-token-prediction',
  '--speculative-config',
  '--speculative-algorithm',
];

/** Whether an instance's argv drafts tokens speculatively (its acceptance is then worth showing). */
export function usesSpeculation(argv: string[]): boolean {
  return argv.some((a) => SPECULATIVE_FLAGS.includes(a));
}

/** "62 % of 171 drafted tokens accepted · 2.2 tokens a step", or what is missing. */
export function speculationLine(v: SpeculationView): string {
  if (!v.available) return v.reason ?? 'no counters from the engine';
  if (v.drafted === 0) return v.acceptance_rate === null ? 'nothing drafted yet' : `${Math.round(v.acceptance_rate * 100)} % accepted (engine figure)`;
  const rate = v.acceptance_rate === null ? '' : `${Math.round(v.acceptance_rate * 100)} % of `;
  const length = v.mean_accepted_length === null ? '' : ` · ${v.mean_accepted_length.toFixed(2)} tokens a step`;
  return `${rate}${v.drafted} drafted tokens accepted${length}`;
}
