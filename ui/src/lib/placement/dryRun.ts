// llama.cpp's dry run beside our estimate: per device, model / context / compute in whole MiB
// (llama.cpp prints whole MiB, rounded down) and how far ours is from its figure, the build it
// came from, or why there is none (no build registered for the rig's backend, llama.cpp's own
// failure message).

import type { DryRunResponse, Margins, MemoryFigures, PlacementOptions, PlanResponse, RigRequest } from '../api/types';
import { formatBytes } from '../format/units';

export const MIB = 1024 ** 2;

/** Within this many percent ours counts as the same as llama.cpp's. */
export const SAME_PCT = 2;

export type DryRunPart = 'model' | 'context' | 'compute';

export const DRY_RUN_PARTS: { part: DryRunPart; label: string; key: keyof MemoryFigures }[] = [
  { part: 'model', label: 'Model', key: 'model_bytes' },
  { part: 'context', label: 'Context', key: 'context_bytes' },
  { part: 'compute', label: 'Compute', key: 'compute_bytes' },
];

/** The one-line note under the table. */
export const COMPUTE_NOTE =
  'Ours / llama.cpp’s, in MiB. Our compute estimate is meant to sit a little above llama.cpp’s (a margin for its scratch buffers), so a few % over there is expected.';

/** Bytes as whole MiB, the way llama.cpp prints them: 1 610 612 736 → "1536". */
export function mibText(bytes: number): string {
  return String(Math.round(bytes / MIB));
}

export interface PartDiff {
  part: DryRunPart | 'total';
  ours: number;
  theirs: number;
  /** (ours − llama.cpp) / llama.cpp in percent; null when llama.cpp says 0 and ours is not. */
  pct: number | null;
  /** "+1.2 %", "−0.4 %", "0 %", or "new" (llama.cpp has none of it). */
  pctText: string;
  /** Within SAME_PCT, or closer than llama.cpp's own rounding (1 MiB): neutral; else amber. */
  tone: 'same' | 'off';
  /** "1536 / 1530". */
  text: string;
  title: string;
}

/** A difference in %, signed: "+1.2 %", "−0.4 %", "+12 %" (whole past 10), "0 %". */
export function signedPct(pct: number): string {
  const r = Math.abs(pct) >= 10 ? Math.round(pct) : Math.round(pct * 10) / 10;
  if (r === 0) return '0 %';
  return `${r > 0 ? '+' : '−'}${Math.abs(r)} %`;
}

/** One part of one device: ours against llama.cpp's. */
export function partDiff(part: DryRunPart | 'total', ours: number, theirs: number): PartDiff {
  // llama.cpp rounds down to whole MiB: anything closer than that is the same figure.
  const withinRounding = Math.abs(ours - theirs) < MIB;
  const pct = theirs > 0 ? ((ours - theirs) / theirs) * 100 : withinRounding ? 0 : null;
  const same = withinRounding || (pct != null && Math.abs(pct) <= SAME_PCT);
  return {
    part,
    ours,
    theirs,
    pct,
    pctText: pct == null ? 'new' : signedPct(pct),
    tone: same ? 'same' : 'off',
    text: `${mibText(ours)} / ${mibText(theirs)}`,
    title: `${part}: ours ${formatBytes(ours)} (${ours.toLocaleString('en-US')} bytes), llama.cpp ${mibText(theirs)} MiB`,
  };
}

export interface DryRunRow {
  /** llama.cpp's name for the device (`CUDA0`, `Host`): unique in a table. */
  llamaDevice: string;
  /** Ours ("GPU 0 · NVIDIA GeForce RTX 3090"). */
  device: string;
  parts: PartDiff[];
  /** True when any part is off by more than SAME_PCT. */
  off: boolean;
}

export function dryRunRows(res: Pick<DryRunResponse, 'devices'>): DryRunRow[] {
  return res.devices.map((d) => {
    const parts = DRY_RUN_PARTS.map(({ part, key }) => partDiff(part, d.ours[key], d.llama_cpp[key]));
    return { llamaDevice: d.llama_device, device: d.device, parts, off: parts.some((p) => p.tone === 'off') };
  });
}

/** "llama.cpp b6123 cuda". */
export function buildLabel(build: DryRunResponse['build']): string | null {
  return build ? `llama.cpp ${build.version} ${build.backend}` : null;
}

/** The daemon's "no llama.cpp build with llama-fit-params is registered …": the fix is a build on
 *  the Engines page. */
export function isNoBuildError(error: string | null | undefined): boolean {
  return error != null && /no llama\.cpp build/i.test(error);
}

export type DryRunView =
  | { kind: 'error'; message: string; noBuild: boolean; refused: boolean; build: string | null }
  | { kind: 'table'; rows: DryRunRow[]; build: string | null; notes: string[]; args: string[] };

/** What the panel shows for an answer. */
export function dryRunView(res: DryRunResponse): DryRunView {
  const build = buildLabel(res.build);
  if (res.error != null || !res.dry_run) {
    const message = res.error ?? 'llama.cpp’s dry run gave no table.';
    return { kind: 'error', message, noBuild: isNoBuildError(message), refused: res.refused === true, build };
  }
  return { kind: 'table', rows: dryRunRows(res), build, notes: res.dry_run.notes, args: res.dry_run.args };
}

/** The dry run of the plan on show: the options the daemon planned (the automatic placer's
 *  choice included), so it checks exactly the flags of the command line. */
export function dryRunBodyFor(model: string, res: PlanResponse, margins: Margins): { model: string; rig: RigRequest; options: PlacementOptions; margins: Margins } {
  return { model, rig: res.rig, options: res.report.options, margins };
}

function total(f: MemoryFigures): number {
  return f.model_bytes + f.context_bytes + f.compute_bytes;
}

export interface DryRunSummary {
  ok: boolean;
  /** "llama.cpp: CUDA0 1.2 GiB (ours +0.4 %) · Host 310.0 MiB (ours 0 %)", or the error. */
  text: string;
  /** Every part of every device, for the tooltip. */
  title: string;
  /** Set when ours is off by more than SAME_PCT on some device's total. */
  off: boolean;
  noBuild: boolean;
}

/** One line for a hub quantization's row: llama.cpp's total per device, and ours against it. */
export function dryRunSummary(res: DryRunResponse): DryRunSummary {
  const view = dryRunView(res);
  if (view.kind === 'error') return { ok: false, text: view.message, title: view.message, off: false, noBuild: view.noBuild };
  if (res.devices.length === 0) {
    const message = 'llama.cpp’s table named none of the planned devices.';
    return { ok: false, text: message, title: message, off: false, noBuild: false };
  }
  let off = false;
  const parts = res.devices.map((d) => {
    const diff = partDiff('total', total(d.ours), total(d.llama_cpp));
    off ||= diff.tone === 'off';
    return `${d.llama_device} ${formatBytes(total(d.llama_cpp))} (ours ${diff.pctText})`;
  });
  const title = [
    ...(view.build ? [view.build] : []),
    ...dryRunRows(res).map((r) => `${r.llamaDevice} (${r.device}): ${r.parts.map((p) => `${p.part} ${p.text} MiB ${p.pctText}`).join(', ')}`),
  ].join('\n');
  return { ok: true, text: `llama.cpp: ${parts.join(' · ')}`, title, off, noBuild: false };
}
