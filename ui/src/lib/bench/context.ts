// A run's context (free-form JSON: target, engine build, command line, model file and
// quantization, placement, hardware before and after) as a readable tree of labelled values,
// with the command line taken out to show in monospace with a Copy button.

export interface ContextNode {
  /** "engine", "hardware before", "GPU 0"… */
  label: string;
  /** A leaf's text; null for a branch. */
  value: string | null;
  children: ContextNode[];
}

/** Keys the daemon writes, in words; others are shown with underscores as spaces. */
const LABELS: Record<string, string> = {
  hardware_before: 'hardware before',
  hardware_after: 'hardware after',
  command_line: 'command line',
  planned_memory: 'planned memory',
  measured_memory: 'measured memory',
  extra_args: 'extra arguments',
  size_bytes: 'size (bytes)',
  bits_per_weight: 'bits per weight',
  util_pct: 'utilization %',
  usage_pct: 'usage %',
  temperature_c: 'temperature °C',
  power_w: 'power W',
  power_limit_w: 'power limit W',
  sm_clock_mhz: 'SM clock MHz',
  sm_clock_max_mhz: 'SM clock max MHz',
  memory_clock_mhz: 'memory clock MHz',
  memory_clock_max_mhz: 'memory clock max MHz',
  memory_used_bytes: 'memory used (bytes)',
  memory_total_bytes: 'memory total (bytes)',
  throttle_reasons: 'throttle reasons',
  with_key: 'with an API key',
};

export function keyLabel(key: string): string {
  return LABELS[key] ?? key.replace(/_/g, ' ');
}

/** Values written with a fixed number of decimals, by key (as the model pages write them). */
const DECIMALS: Record<string, number> = {
  bits_per_weight: 2,
};

function leafText(v: unknown, key: string): string {
  if (v === null || v === undefined) return '—';
  const decimals = DECIMALS[key];
  if (typeof v === 'number' && decimals !== undefined && Number.isFinite(v)) return v.toFixed(decimals);
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (typeof v === 'string') return v === '' ? '""' : v;
  return String(v);
}

/** An array item's label: a GPU's index and name when it has them, else its position. */
function itemLabel(v: unknown, i: number): string {
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    if (typeof o.index === 'number') return `GPU ${o.index}${typeof o.name === 'string' ? ` · ${o.name}` : ''}`;
    if (typeof o.gpu === 'number') return `GPU ${o.gpu}`;
  }
  return `#${i + 1}`;
}

function node(key: string, label: string, v: unknown): ContextNode {
  if (Array.isArray(v)) {
    // A list of plain values reads best on one line ("--flash-attn on", "[]").
    if (v.every((x) => x === null || typeof x !== 'object')) return { label, value: v.length === 0 ? 'none' : v.map((x) => leafText(x, key)).join(' '), children: [] };
    return { label, value: null, children: v.map((x, i) => node(key, itemLabel(x, i), x)) };
  }
  if (v && typeof v === 'object') {
    return { label, value: null, children: Object.entries(v as Record<string, unknown>).map(([k, x]) => node(k, keyLabel(k), x)) };
  }
  return { label, value: leafText(v, key), children: [] };
}

/** The context's tree, without the command line (shown on its own). */
export function contextTree(context: Record<string, unknown>): ContextNode[] {
  return Object.entries(context)
    .filter(([k]) => k !== 'command_line')
    .map(([k, v]) => node(k, keyLabel(k), v));
}

/** The exact command line the engine ran with, where the daemon knew it. */
export function commandLine(context: Record<string, unknown>): string | null {
  const c = context.command_line;
  return typeof c === 'string' && c.trim() !== '' ? c : null;
}
