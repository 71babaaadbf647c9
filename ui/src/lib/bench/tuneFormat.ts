// How the Tuning half of the Benchmarks page writes a tuning's parts: the knob values a trial
// changed ("threads=8, ubatch=256", "as saved"), the objective with its unit and direction, a
// trial's figure ("192.9 ± 8.5 tok/s"), outcomes and verdicts as chips, where a tuning stands
// ("trial 3 of ≤ 7"), the best's gain ("+12.3 %"), the spec in words, the quality floor and each
// trial's KL divergence against it, and the per-trial chart's lines. Numbers go through format.ts
// (KLDs through the Quality part's), like the rest of the page.

import { MISSING } from '../format/units';
import { formatKld, formatKldWithUnc, formatShare } from '../quality/format';
import { formatTps, shapeLabel, type StatusTone } from './format';
import type { XYData } from './series';
import type { QualityFloor, Stats, Trial, TrialKld, TrialOutcome, TuneKnob, TuneObjective, TuneSpec, TuneStrategy, TuneView, Verdict } from './types';

/** The objectives in the order the form offers them; TTFT is the one where lower is better. */
export const OBJECTIVES: { value: TuneObjective; label: string; unit: string }[] = [
  { value: 'aggregate_tps', label: 'Aggregate output tok/s', unit: 'tok/s' },
  { value: 'stream_tps', label: 'Per-stream tok/s', unit: 'tok/s' },
  { value: 'prefill_tps', label: 'Prefill tok/s', unit: 'tok/s' },
  { value: 'ttft_ms', label: 'Time to first token (lower is better)', unit: 'ms' },
];

/** The daemon's default objective. */
export const DEFAULT_OBJECTIVE: TuneObjective = 'aggregate_tps';

function objectiveOf(o: TuneObjective | undefined) {
  return OBJECTIVES.find((x) => x.value === (o ?? DEFAULT_OBJECTIVE)) ?? OBJECTIVES[0]!;
}

/** "tok/s" or "ms". */
export function objectiveUnit(o: TuneObjective | undefined): string {
  return objectiveOf(o).unit;
}

/** "aggregate output tok/s", "time to first token (lower is better)". */
export function objectiveLabel(o: TuneObjective | undefined): string {
  return objectiveOf(o).label;
}

/** One line each, for the form's strategy choice. */
export const STRATEGIES: { value: TuneStrategy; label: string; note: string }[] = [
  { value: 'walk', label: 'Walk', note: 'one knob at a time from the best so far, upward; stops a knob at its first value worse beyond the noise (or failing)' },
  { value: 'grid', label: 'Grid', note: 'every combination of every knob’s values: thorough, but the trials multiply' },
];

/** A knob's value as written: an empty value is the flag alone. */
function valueText(knob: string, value: string): string {
  return value === '' ? `${knob} (switch)` : `${knob}=${value}`;
}

/** The knobs a trial changed, in name order like the daemon's: "threads=8, ubatch=256"; none is
 *  the baseline, "as saved". */
export function describeValues(values: Record<string, string>): string {
  const names = Object.keys(values).sort();
  if (names.length === 0) return 'as saved';
  return names.map((k) => valueText(k, values[k]!)).join(', ');
}

/** "192.9 ± 8.5 tok/s": the median and the standard deviation of the warm runs. */
export function objectiveText(s: Stats | null | undefined, o: TuneObjective | undefined): string {
  if (!s) return MISSING;
  return `${formatTps(s.median)} ± ${formatTps(s.stdev)} ${objectiveUnit(o)}`;
}

/** A trial's outcome as a chip: out of memory and crashes stand out. */
export function outcomeChip(outcome: TrialOutcome | (string & {})): { label: string; tone: StatusTone | '' } {
  switch (outcome) {
    case 'running':
      return { label: 'running', tone: 'info' };
    case 'measured':
      return { label: 'measured', tone: '' };
    case 'out_of_memory':
      return { label: 'out of memory', tone: 'bad' };
    case 'crashed':
      return { label: 'crashed', tone: 'bad' };
    case 'failed':
      return { label: 'failed', tone: 'bad' };
    default:
      return { label: outcome, tone: 'warn' };
  }
}

/** A decision's verdict as a badge. */
export function verdictChip(verdict: Verdict | (string & {})): { label: string; tone: StatusTone | '' } {
  switch (verdict) {
    case 'baseline':
      return { label: 'baseline', tone: '' };
    case 'better':
      return { label: 'better', tone: 'ok' };
    case 'within_noise':
      return { label: 'within noise', tone: 'info' };
    case 'worse':
      return { label: 'worse', tone: 'warn' };
    case 'broke_floor':
      return { label: 'over the floor', tone: 'bad' };
    case 'failed':
      return { label: 'failed', tone: 'bad' };
    default:
      return { label: verdict, tone: '' };
  }
}

/** Where a tuning stands: "trial 3 of ≤ 7" while it runs, "7 trials" after (a walk may stop
 *  before its planned count). */
export function tuneProgress(t: Pick<TuneView, 'status' | 'trials' | 'trials_planned'>): string {
  if (t.status === 'running') return `trial ${Math.max(1, t.trials.length)} of ≤ ${t.trials_planned}`;
  return `${t.trials.length} trial${t.trials.length === 1 ? '' : 's'}`;
}

/** A gain in percent, signed: 12.34 → "+12.3 %". */
export function formatGain(percent: number | null | undefined): string {
  if (percent == null || !Number.isFinite(percent)) return MISSING;
  return `${percent >= 0 ? '+' : '−'}${Math.abs(percent).toFixed(1)} %`;
}

/** A knob's values in words: "threads 2, 4, 8", "ubatch 128–512 step 128". */
export function knobText(k: TuneKnob): string {
  if (k.range) return `${k.name} ${k.range.from}–${k.range.to} step ${k.range.step}`;
  return `${k.name} ${(k.values ?? []).map((v) => (v === '' ? '(switch)' : String(v))).join(', ')}`;
}

/** The spec in words: "walk over threads 2, 4, 8; ubatch 128, 256 by aggregate output tok/s, at
 *  512:128, 1 stream, 5 warm runs per trial". */
export function tuneSpecText(s: TuneSpec): string {
  const b = s.bench ?? {};
  const shape = b.shapes?.[0] ? shapeLabel(b.shapes[0]) : '512:128';
  const streams = b.concurrency?.[0] ?? 1;
  const depth = b.depths?.[0] ? ` @ depth ${b.depths[0]}` : '';
  const warm = b.warm_runs ?? 5;
  const knobs = s.knobs.map(knobText).join('; ');
  const floor = floorText(s.quality_floor);
  return `${s.strategy ?? 'walk'} over ${knobs} by ${objectiveLabel(s.objective).toLowerCase()}, at ${shape}${depth}, ${streams} stream${streams === 1 ? '' : 's'}, ${warm} warm runs per trial${floor ? `; quality floor: ${floor}` : ''}`;
}

/** "mean KLD ≤ 0.0100 against reference r1", or "no worse than the profile as saved against …". */
export function floorText(floor: QualityFloor | null | undefined): string | null {
  if (!floor) return null;
  const bound = floor.max_mean_kld != null ? `mean KLD ≤ ${formatKld(floor.max_mean_kld)}` : 'no worse than the profile as saved';
  return `${bound} against reference ${floor.reference}`;
}

/** A trial's mean KLD with its uncertainty: "0.0123 ± 0.0004". */
export function trialKldText(k: TrialKld | null | undefined): string {
  return k ? formatKldWithUnc(k.mean, k.mean_unc) : MISSING;
}

/** Under the figure: the top-token share, whose figure it is when an earlier trial's was reused,
 *  and the bound it went over. */
export function kldNote(k: TrialKld): string {
  const parts = [`top token ${formatShare(k.same_top)}`];
  if (k.same_numerics_as != null) parts.push(`KLD of trial ${k.same_numerics_as + 1}: same numerics`);
  if (k.within === false && k.bound != null) parts.push(`over the bound ${formatKld(k.bound)}`);
  return parts.join(' · ');
}

/** The best's line about the floor: "Respects the quality floor: mean KLD … ≤ bound …". */
export function bestFloorText(k: TrialKld | null | undefined): string | null {
  if (!k) return null;
  const bound = k.bound != null ? ` ≤ bound ${formatKld(k.bound)}` : '';
  return `Respects the quality floor: mean KLD ${trialKldText(k)}${bound}.`;
}

/** The objective per trial (x is the trial's number, from 1): the median, and p10 and p90 dashed
 *  around it; gaps where a trial measured nothing. */
export function trialSeries(trials: readonly Trial[], color = '#4ea1ff'): XYData {
  const line = (key: 'median' | 'p10' | 'p90') => trials.map((t) => t.objective?.[key] ?? null);
  return {
    x: trials.map((t) => t.index + 1),
    series: [
      { label: 'median', color, values: line('median') },
      { label: 'p10', color: `${color}88`, values: line('p10'), dashed: true },
      { label: 'p90', color: `${color}88`, values: line('p90'), dashed: true },
    ],
  };
}
