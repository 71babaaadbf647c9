// How the Quality section writes its figures: KL divergences (small numbers, three significant
// digits), shares ("99.1 %"), each with llama-perplexity's uncertainty ("0.0123 ± 0.0004"); a
// reference's corpus, windows and state; and the estimate before recording, in plain words.
// `null` renders as an em dash.

import { formatCount } from '../format/model';
import { formatBytes, MISSING } from '../format/units';
import { formatDuration } from '../format/time';
import type { CorpusSpec, KldResult, Reference, ReferenceEstimate } from './types';

function finite(v: number | null | undefined): v is number {
  return v != null && Number.isFinite(v);
}

/** Decimals that give `v` three significant digits (at most 6, at least 3): 0.0123 → 4. */
function kldDecimals(v: number): number {
  const a = Math.abs(v);
  if (a === 0 || a >= 1) return 3;
  return Math.min(6, Math.max(3, 2 - Math.floor(Math.log10(a))));
}

/** A KL divergence in nats: 0.012345 → "0.0123", 1.5 → "1.500", 0 → "0". */
export function formatKld(v: number | null | undefined): string {
  if (!finite(v)) return MISSING;
  if (v === 0) return '0';
  return v.toFixed(kldDecimals(v));
}

/** A figure with its uncertainty, both at the decimals the figure needs: "0.0123 ± 0.0004". */
export function formatKldWithUnc(v: number | null | undefined, unc: number | null | undefined): string {
  if (!finite(v)) return MISSING;
  if (!finite(unc)) return formatKld(v);
  const digits = kldDecimals(v === 0 ? unc : v);
  return `${v.toFixed(digits)} ± ${unc.toFixed(digits)}`;
}

/** A share 0–1 as a percentage with one decimal: 0.9912 → "99.1 %". */
export function formatShare(f: number | null | undefined): string {
  if (!finite(f)) return MISSING;
  return `${(f * 100).toFixed(1)} %`;
}

/** A share with its uncertainty, both in percent: "99.1 ± 0.2 %" (finer when it is below 0.05). */
export function formatShareWithUnc(f: number | null | undefined, unc: number | null | undefined): string {
  if (!finite(f)) return MISSING;
  if (!finite(unc)) return formatShare(f);
  const digits = unc * 100 < 0.05 ? 2 : 1;
  return `${(f * 100).toFixed(digits)} ± ${(unc * 100).toFixed(digits)} %`;
}

/** A ratio near 1 (PPL of the profile over the reference's): "1.0123 ± 0.0004". */
export function formatPplRatio(r: number | null | undefined, unc: number | null | undefined): string {
  if (!finite(r)) return MISSING;
  return finite(unc) ? `${r.toFixed(4)} ± ${unc.toFixed(4)}` : r.toFixed(4);
}

/** Whether two figures' ± ranges overlap: then the data cannot tell them apart. */
export function intervalsOverlap(a: number, aUnc: number, b: number, bUnc: number): boolean {
  return Math.abs(a - b) <= Math.abs(aUnc) + Math.abs(bUnc);
}

/** The list's headline of a KLD run: "Mean KLD 0.0123 ± 0.0004, same top 99.1 %". */
export function kldHeadline(k: KldResult | null | undefined): string {
  if (!k) return 'no result yet';
  return `Mean KLD ${formatKldWithUnc(k.mean, k.mean_unc)}, same top ${formatShare(k.same_top)}`;
}

/** The corpus in a few words: "built-in", "file notes.txt", "3 conversations". */
export function corpusText(c: CorpusSpec): string {
  switch (c.kind) {
    case 'builtin':
      return 'built-in';
    case 'file':
      return `file ${c.path.split('/').pop() || c.path}`;
    case 'conversations':
      return `${c.ids.length} conversation${c.ids.length === 1 ? '' : 's'}`;
  }
}

/** Windows of the reference: "8192 × 12" tokens, or "8192 × all" when every window is scored. */
export function windowsText(r: Pick<Reference, 'context' | 'chunks'>): string {
  return `${formatCount(r.context)} × ${r.chunks == null ? 'all' : formatCount(r.chunks)}`;
}

/** A recording's state: "recording 40 %, about 3 min left", "ready", "failed". */
export function referenceStateText(r: Pick<Reference, 'state' | 'progress'>): string {
  if (r.state !== 'recording') return r.state;
  const p = r.progress;
  if (!p) return 'recording';
  const pct = `${Math.round(Math.min(1, Math.max(0, p.fraction)) * 100)} %`;
  if (!finite(p.eta_s)) return `recording ${pct}`;
  const left = p.eta_s < 60 ? 'under a minute left' : `about ${formatDuration(Math.round(p.eta_s / 60) * 60_000)} left`;
  return `recording ${pct}, ${left}`;
}

/** Budget left after what is stored: never below zero. */
export function budgetLeft(e: Pick<ReferenceEstimate, 'budget_bytes' | 'used_bytes'>): number {
  return Math.max(0, e.budget_bytes - e.used_bytes);
}

/** The estimate in plain words: "2 048 tokens scored in 4 windows (of 9 000 in the corpus);
 *  1.0 GiB on disk, of 19.0 GiB left in the 20.0 GiB budget; 400.0 GiB free on the disk." */
export function estimateText(e: ReferenceEstimate): string {
  const windows = `${formatCount(e.chunks)} window${e.chunks === 1 ? '' : 's'}`;
  const scored = `${formatCount(e.scored_tokens)} tokens scored in ${windows} (of ${formatCount(e.corpus_tokens)} in the corpus)`;
  const disk = `${formatBytes(e.bytes)} on disk, of ${formatBytes(budgetLeft(e))} left in the ${formatBytes(e.budget_bytes)} budget`;
  const free = e.free_disk_bytes == null ? '' : `; ${formatBytes(e.free_disk_bytes)} free on the disk`;
  return `${scored}; ${disk}${free}.`;
}

/** Whether the file would fit the budget that is left. */
export function fitsBudget(e: ReferenceEstimate): boolean {
  return e.bytes <= budgetLeft(e);
}

/** An axis' KLD labels at the decimals their spacing needs, so neighbours never read the same:
 *  [0, 0.0000002, 0.0000004] → "0", "0.0000002", "0.0000004". */
export function kldAxisLabels(splits: readonly number[]): string[] {
  const steps = splits.slice(1).map((v, i) => Math.abs(v - splits[i]!)).filter((d) => d > 0);
  const step = steps.length > 0 ? Math.min(...steps) : Math.abs(splits[0] ?? 0) || 1;
  let decimals = Math.max(0, Math.ceil(-Math.log10(step) - 1e-9));
  // 0.025 needs three decimals, not the two its size suggests.
  const exact = (d: number) => Math.abs(Math.round(step * 10 ** d) - step * 10 ** d) < 1e-6 * step * 10 ** d;
  while (decimals < 10 && !exact(decimals)) decimals++;
  return splits.map((v) => (v === 0 ? '0' : v.toFixed(decimals)));
}
