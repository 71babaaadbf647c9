// This rig's records beside a plan, in words: per device "estimate off by x % on this rig last
// time", from which check, and what the correction the plan already uses changed (the compute
// buffer scaled, a GPU's overhead measured); the same for a library model by its architecture.
// The daemon does the learning (crates/core/src/calibration); this only says what it found.

import type {
  Calibration,
  CalibrationSource,
  DeviceCalibration,
  DeviceId,
  DevicePlan,
  PlanCorrection,
} from '../api/types';
import { formatAgo, formatDateTime } from '../format/time';
import { formatBytes, formatMiB } from '../format/units';
import { formatGiB, gib, type SegmentKind } from './bars';
import { sameDevice } from './devices';
import { SAME_PCT, signedPct } from './dryRun';

const SOURCE_WORDS: Record<CalibrationSource, string> = {
  dry_run: 'llama.cpp dry run',
  measured: 'measured engine',
};

/** "llama.cpp dry run" or "measured engine"; a source this UI does not know, as the daemon sent it. */
export function sourceWords(source: CalibrationSource | (string & {})): string {
  return SOURCE_WORDS[source as CalibrationSource] ?? source;
}

/** The calibration the plan applied to a device, or null when this rig has no record for it. */
export function calibrationFor(list: readonly DeviceCalibration[] | null | undefined, id: DeviceId): DeviceCalibration | null {
  return list?.find((c) => sameDevice(c.device, id)) ?? null;
}

/** "+12 %", "−2.5 %", "0 %" (+ = the estimate was too high); null when nothing was observed. */
export function offText(c: Pick<Calibration, 'last'>): string | null {
  const pct = c.last.off_by_percent;
  return pct != null && Number.isFinite(pct) ? signedPct(pct) : null;
}

/** The compute factor as it shows, when it changes a figure: a broken one (not finite, not
 *  positive) changes nothing in the plan (crates/placement/src/correction.rs), and one that reads
 *  1.00 is not worth a word. */
function shownFactor(c: PlanCorrection): string | null {
  const f = c.compute_factor;
  const text = Number.isFinite(f) && f > 0 ? f.toFixed(2) : null;
  return text === '1.00' ? null : text;
}

/** What the correction changes, in words: "compute × 0.73", "overhead 300 MiB measured"; empty
 *  when it changes nothing (a factor of 1.00 and no measured overhead). */
export function correctionParts(c: PlanCorrection): string[] {
  const parts: string[] = [];
  const f = shownFactor(c);
  if (f != null) parts.push(`compute × ${f}`);
  if (c.overhead_bytes != null) parts.push(`overhead ${formatMiB(c.overhead_bytes)} measured`);
  return parts;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

export interface CalibrationNoteView {
  /** "+12 %"; null when the last check observed nothing. */
  off: string | null;
  /** Past SAME_PCT either way: amber, like the dry-run table. */
  tone: 'same' | 'off';
  /** "llama.cpp dry run". */
  source: string;
  /** "2 h 3 min ago". */
  ago: string;
  /** "compute × 0.73 · overhead 300 MiB measured", or null when the records change nothing. */
  correction: string | null;
  /** Every figure behind the line, for the tooltip. */
  title: string;
}

/** One device's line: the last check and the correction the plan on show already uses. */
export function calibrationNote(c: Calibration, nowMs: number): CalibrationNoteView {
  const off = offText(c);
  const parts = correctionParts(c.correction);
  const last = c.last;
  const f = shownFactor(c.correction);
  const uses: string[] = [];
  if (f != null) uses.push(`compute × ${f} (llama.cpp’s compute buffer / ours, the median of recent dry runs)`);
  if (c.correction.overhead_bytes != null) {
    uses.push(`overhead ${formatMiB(c.correction.overhead_bytes)} (what measured engines held beyond weights, KV and compute) in place of the margin`);
  }
  const title = [
    `Last check: ${sourceWords(last.source)} of ${last.model}, ${formatDateTime(last.at_ms)}: estimated ${formatBytes(last.estimated_bytes)}, observed ${formatBytes(last.observed_bytes)}${off ? ` (${off}; + = the estimate was too high)` : ''}.`,
    `Records for ${c.architecture} on ${c.device_model} (${c.backend}): ${plural(c.dry_runs, 'dry run')}, ${plural(c.measured, 'measured engine')}.`,
    uses.length > 0 ? `The figures shown are corrected: ${uses.join('; ')}.` : 'The records call for no correction: the figures shown are the estimate.',
  ].join('\n');
  return {
    off,
    tone: last.off_by_percent != null && Math.abs(last.off_by_percent) > SAME_PCT ? 'off' : 'same',
    source: sourceWords(last.source),
    ago: formatAgo(last.at_ms, nowMs),
    correction: parts.length > 0 ? parts.join(' · ') : null,
    title,
  };
}

export interface PartFigure {
  /** The row's tooltip: the figure and, where this rig's records changed it, the estimate before. */
  title: string;
  /** The figure before the correction, as the column writes figures (GiB, one decimal), when it
   *  reads differently from the corrected one; else null. */
  before: string | null;
}

/** The estimate a correction replaced on a device's compute or overhead row; null when the
 *  correction left it as it was (or the plan does not say: an older daemon's). */
function uncorrected(kind: SegmentKind, d: DevicePlan): { bytes: number; why: string } | null {
  if (kind === 'compute') {
    const est = d.usage.compute_estimate_bytes;
    // 0 beside a non-zero figure is serde's default in a plan kept from before the records.
    if (est == null || est === 0 || est === d.usage.compute_bytes) return null;
    return { bytes: est, why: 'corrected by this rig’s dry runs' };
  }
  if (kind === 'overhead' && d.spec.id.kind === 'gpu' && d.spec.correction?.overhead_bytes != null) {
    if (d.spec.overhead_bytes === d.usage.overhead_bytes) return null;
    return { bytes: d.spec.overhead_bytes, why: 'measured on this rig' };
  }
  return null;
}

/** A memory part of a device column: its figure, and the uncorrected one where they differ. */
export function partFigure(kind: SegmentKind, label: string, bytes: number, d: DevicePlan): PartFigure {
  const was = uncorrected(kind, d);
  if (!was) return { title: `${label}: ${formatGiB(bytes, 2)}`, before: null };
  const before = gib(was.bytes);
  return {
    title: `${label}: ${formatGiB(bytes, 2)}, ${was.why} (the estimate before: ${formatGiB(was.bytes, 2)}, ${formatMiB(was.bytes)})`,
    before: before === gib(bytes) ? null : before,
  };
}

/** The Plan page's note in its dry-run table: ours before the correction, where it differs. */
export function uncorrectedComputeNote(ours: { compute_bytes: number; compute_estimate_bytes?: number }): string | null {
  const est = ours.compute_estimate_bytes;
  if (est == null || est === 0 || est === ours.compute_bytes) return null;
  return `ours before this rig’s correction: ${formatMiB(est)}`;
}

export interface ModelCalibrationView {
  /** "estimate off by +12 % on this rig last time". */
  text: string;
  off: string | null;
  /** One line per device model and backend with records for the architecture. */
  title: string;
}

/** The library's badge for a model of `architecture`: the newest check of that architecture on
 *  any device of this rig, and every device model's in the title; null with no record. */
export function modelCalibration(list: readonly Calibration[], architecture: string | null | undefined, nowMs: number): ModelCalibrationView | null {
  if (!architecture) return null;
  // Newest first, whatever order the list came in (the daemon sends it so, but a badge must not
  // depend on that).
  const mine = list.filter((c) => c.architecture === architecture).sort((a, b) => b.last.at_ms - a.last.at_ms);
  const newest = mine[0];
  if (!newest) return null;
  const off = offText(newest);
  const lines = mine.map(
    (c) => `${c.device_model} (${c.backend}): ${offText(c) ?? 'nothing observed'} · ${sourceWords(c.last.source)}, ${formatAgo(c.last.at_ms, nowMs)} · ${correctionParts(c.correction).join(' · ') || 'no correction'}`,
  );
  return {
    text: off ? `estimate off by ${off} on this rig last time` : 'estimate checked on this rig',
    off,
    title: [`The memory planner’s last checks of ${architecture} models on this rig (+ = the estimate was too high):`, ...lines].join('\n'),
  };
}
