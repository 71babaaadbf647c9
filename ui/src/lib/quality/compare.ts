// Two KLD runs side by side: each figure of both, the second's difference from the first, and,
// for the figures llama-perplexity gives an uncertainty, whether their ± ranges overlap (then the
// runs cannot be told apart on it).

import { formatKld, formatKldWithUnc, formatPplRatio, formatShareWithUnc, intervalsOverlap } from './format';
import type { KldResult } from './types';

export interface KldCompareRow {
  key: string;
  label: string;
  /** The first run's figure and the second's, written. */
  base: string;
  other: string;
  /** other − base, signed, in the figure's unit ("+0.0021", "−0.4 pts"). */
  diff: string;
  /** Whether the ± ranges overlap; null for a figure without an uncertainty. */
  overlap: boolean | null;
}

function signed(v: number, text: string): string {
  return v > 0 ? `+${text}` : v < 0 ? `−${text.replace(/^-/, '')}` : text;
}

function kldDiff(d: number): string {
  return signed(d, formatKld(d));
}

function pointsDiff(d: number): string {
  return signed(d, `${Math.abs(d * 100).toFixed(1)} pts`);
}

function ratioDiff(d: number): string {
  return signed(d, Math.abs(d).toFixed(4));
}

interface Figure {
  key: string;
  label: string;
  value: (k: KldResult) => number;
  unc?: (k: KldResult) => number;
  text: (k: KldResult) => string;
  diff: (d: number) => string;
}

const FIGURES: Figure[] = [
  { key: 'mean', label: 'Mean KLD', value: (k) => k.mean, unc: (k) => k.mean_unc, text: (k) => formatKldWithUnc(k.mean, k.mean_unc), diff: kldDiff },
  { key: 'p99', label: '99 % KLD', value: (k) => k.p99, text: (k) => formatKld(k.p99), diff: kldDiff },
  { key: 'max', label: 'Max KLD', value: (k) => k.max, text: (k) => formatKld(k.max), diff: kldDiff },
  {
    key: 'same_top',
    label: 'Same top token',
    value: (k) => k.same_top,
    unc: (k) => k.same_top_unc,
    text: (k) => formatShareWithUnc(k.same_top, k.same_top_unc),
    diff: pointsDiff,
  },
  { key: 'rms_dp', label: 'RMS Δp', value: (k) => k.rms_dp, unc: (k) => k.rms_dp_unc, text: (k) => formatShareWithUnc(k.rms_dp, k.rms_dp_unc), diff: pointsDiff },
  {
    key: 'ppl_ratio',
    label: 'PPL ratio',
    value: (k) => k.ppl_ratio,
    unc: (k) => k.ppl_ratio_unc,
    text: (k) => formatPplRatio(k.ppl_ratio, k.ppl_ratio_unc),
    diff: ratioDiff,
  },
];

/** The rows comparing `other` to `base`. */
export function compareKld(base: KldResult, other: KldResult): KldCompareRow[] {
  return FIGURES.map((f) => {
    const a = f.value(base);
    const b = f.value(other);
    return {
      key: f.key,
      label: f.label,
      base: f.text(base),
      other: f.text(other),
      diff: f.diff(b - a),
      overlap: f.unc ? intervalsOverlap(a, f.unc(base), b, f.unc(other)) : null,
    };
  });
}

/** One line under the table: whether the runs differ on Mean KLD beyond their uncertainty. */
export function kldVerdict(base: KldResult, other: KldResult): string {
  if (intervalsOverlap(base.mean, base.mean_unc, other.mean, other.mean_unc)) {
    return 'Not distinguishable on Mean KLD: the ± ranges overlap.';
  }
  return other.mean < base.mean ? 'The second run is closer to the reference: its Mean KLD is lower beyond the uncertainty.' : 'The first run is closer to the reference: its Mean KLD is lower beyond the uncertainty.';
}
