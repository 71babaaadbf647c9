// "Will it fit" as the model page shows it: a verdict's colour and short name, each device's share
// in a compact form, the speed ceiling, and the context lengths to plan for.

import type { DeviceFit, DryRunRequest, FileGroup, FitVerdict, QuantFit } from '../api/types';
import type { Tone } from '../engines/instances';
import { fraction, MISSING } from '../format/units';
import { gib } from '../placement/bars';

/** Green on the GPUs, or on the CPU of a rig that has no GPU (the best place there is); blue with
 *  experts in RAM (the usual way to run a large MoE, and still fast); amber when whole layers run
 *  from RAM beside GPUs (slow); red when it does not fit. */
export function verdictTone(v: FitVerdict | null): Tone {
  switch (v?.kind) {
    case 'on_gpus':
    case 'cpu_only':
      return 'ok';
    case 'experts_in_ram':
      return 'info';
    case 'layers_in_ram':
      return 'warn';
    case 'does_not_fit':
      return 'bad';
    default:
      return 'muted';
  }
}

/** The verdict in two or three words, for a narrow column (the daemon's summary is the tooltip). */
export function verdictLabel(v: FitVerdict | null): string {
  switch (v?.kind) {
    case 'on_gpus':
      return v.gpus === 1 ? 'on the GPU' : `on ${v.gpus} GPUs`;
    case 'experts_in_ram':
      return `experts of ${v.layers} layer${v.layers === 1 ? '' : 's'} in RAM`;
    case 'layers_in_ram':
      return `${v.layers} layer${v.layers === 1 ? '' : 's'} in RAM`;
    case 'cpu_only':
      return 'on the CPU';
    case 'does_not_fit':
      return `${gib(v.short_bytes)} GiB short`;
    default:
      return 'unknown';
  }
}

/** "GPU 0 · NVIDIA GeForce RTX 3090" → "GPU 0"; "CPU RAM · Ryzen 9" → "CPU RAM". */
export function shortDeviceName(name: string): string {
  const i = name.indexOf(' · ');
  return i >= 0 ? name.slice(0, i) : name;
}

export interface DeviceShare {
  name: string;
  /** The device's full name and its numbers, for the tooltip. */
  title: string;
  /** "18.2/23.5": GiB used of what the plan may fill (capacity less the reserve). */
  text: string;
  /** Used share of what the plan may fill, percent (0–100). */
  pct: number;
  over: boolean;
}

/** Each device's part of the plan, against capacity less the reserve the planner kept (the
 *  placement editor's column headline); devices the plan leaves empty are left out. */
export function deviceShares(devices: DeviceFit[]): DeviceShare[] {
  return devices
    .filter((d) => d.used_bytes > 0)
    .map((d) => {
      const usable = Math.max(0, d.capacity_bytes - d.reserve_bytes);
      return {
        name: shortDeviceName(d.name),
        title: `${d.name}: ${gib(d.used_bytes)} of ${gib(usable)} GiB (${gib(d.capacity_bytes)} GiB less ${gib(d.reserve_bytes)} GiB reserved)`,
        text: `${gib(d.used_bytes)}/${gib(usable)}`,
        pct: fraction(d.used_bytes, usable) ?? 100,
        over: d.used_bytes > usable,
      };
    });
}

/** The decode speed ceiling, "≤ 41 tok/s", or a dash. */
export function speedText(tokensPerS: number | null): string {
  if (tokensPerS == null || !Number.isFinite(tokensPerS) || tokensPerS <= 0) return MISSING;
  return `≤ ${tokensPerS.toFixed(tokensPerS >= 100 ? 0 : 1)} tok/s`;
}

/** The context lengths offered as buttons; any other is typed. */
export const CONTEXT_CHOICES = [8192, 32768, 65536, 131072];
export const DEFAULT_CONTEXT = 32768;
/** What POST /hub/fit accepts. */
export const MAX_CONTEXT = 1 << 24;

/** 32768 → "32K", 1000 → "1000". */
export function contextLabel(tokens: number): string {
  return tokens % 1024 === 0 ? `${tokens / 1024}K` : String(tokens);
}

/** A typed context: "40000", "48k", "48 K" (K = 1024 tokens); null when not 1 to 16M tokens. */
export function parseContext(text: string): number | null {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kK])?\s*$/.exec(text);
  if (!m) return null;
  const n = Math.round(Number(m[1]) * (m[2] ? 1024 : 1));
  return n >= 1 && n <= MAX_CONTEXT ? n : null;
}

/** The fit of one quantization, by its label. */
export function fitFor(fits: QuantFit[] | null, label: string): QuantFit | null {
  return fits?.find((f) => f.label === label) ?? null;
}

/** A file's address at one commit: the model's hub page (`${endpoint}/${repo}`) + `/resolve/` +
 *  the commit + the path, each path segment percent-encoded; null for a page address that is not
 *  http(s). */
export function resolveUrl(pageUrl: string, commit: string, path: string): string | null {
  if (!/^https?:\/\//i.test(pageUrl)) return null;
  const segments = path.split('/').map(encodeURIComponent).join('/');
  return `${pageUrl.replace(/\/+$/, '')}/resolve/${encodeURIComponent(commit)}/${segments}`;
}

/** llama.cpp's dry run of one quantization as the fit planned it: its first file read from the
 *  hub (the daemon mirrors its headers), the automatic placement at the fit's rig and context. */
export function quantDryRunRequest(pageUrl: string, commit: string, quant: FileGroup, rig: string, context: number): DryRunRequest | null {
  const first = quant.files[0];
  const model = first ? resolveUrl(pageUrl, commit, first.path) : null;
  return model ? { model, rig, options: { context }, auto: true } : null;
}
