// The "New tuning" form as data: the profile, rows of knobs (a value list typed as text, or a
// from/to/step range), the search, the objective and the one workload point each trial measures;
// the request built from it, and how many trials it may need. Only what is plainly missing is
// caught here (no profile, no knob name, no value): the daemon checks the rest (unknown knobs,
// values the profile cannot take, too many trials, fewer than 3 warm runs) and its 400 says so.
// An optional quality floor: a ready reference, and a mean-KLD bound or "no worse than as saved".

import { parseShapes } from './draft';
import { DEFAULT_OBJECTIVE } from './tuneFormat';
import type { BenchApi, BenchSpec, NewTune, QualityFloor, TuneKnob, TuneObjective, TuneSpec, TuneStrategy } from './types';

/** The knob names the daemon knows (crates/core benchmarks/knobs.rs); any engine flag works too. */
export const KNOB_NAMES = [
  'threads',
  'batch',
  'ubatch',
  'parallel',
  'n_gpu_layers',
  'n_cpu_moe',
  'gpu_expert_layers',
  'tensor_split',
  'cache_type',
  'cache_type_k',
  'cache_type_v',
  'flash_attention',
  'draft_max',
] as const;

/** The knob select's entry for an engine flag typed by hand. */
export const OTHER_FLAG = 'other';

/** Example values per knob, for the values box. */
const EXAMPLES: Record<string, string> = {
  threads: '4, 8, 16',
  batch: '512, 1024, 2048',
  ubatch: '128, 256, 512',
  parallel: '1, 2, 4',
  n_gpu_layers: '20, 30, 40',
  n_cpu_moe: '0, 8, 16',
  gpu_expert_layers: '4,4; 6,6; 8,8',
  tensor_split: '3,1; 1,1; 1,3',
  cache_type: 'f16, q8_0, q4_0',
  cache_type_k: 'f16, q8_0, q4_0',
  cache_type_v: 'f16, q8_0, q4_0',
  flash_attention: 'off, on',
  draft_max: '4, 8, 16',
};

export type KnobMode = 'values' | 'range';

/** A fixed mean-KLD bound, or no worse than the profile as saved beyond the uncertainty. */
export type FloorMode = 'bound' | 'base';

export interface KnobDraft {
  /** One of KNOB_NAMES, or OTHER_FLAG with the flag in `flag`. */
  name: string;
  flag: string;
  mode: KnobMode;
  /** "2, 4, 8"; tensor_split's values hold commas, so its list is split on `;`. */
  values: string;
  from: number | null;
  to: number | null;
  step: number | null;
}

export interface TuneDraft {
  name: string;
  profile: string;
  knobs: KnobDraft[];
  strategy: TuneStrategy;
  objective: TuneObjective;
  /** One shape, "512:128". */
  shape: string;
  depth: number | null;
  concurrency: number | null;
  warmRuns: number | null;
  api: BenchApi;
  maxTrials: number | null;
  /** A ready reference's id; empty: no quality floor. */
  floorReference: string;
  floorMode: FloorMode;
  /** The highest mean KLD allowed, when the mode is 'bound'. */
  floorMax: number | null;
}

export function newKnob(name = 'threads'): KnobDraft {
  return { name, flag: '', mode: 'values', values: '', from: null, to: null, step: null };
}

/** The draft with another knob row: the first knob not tuned yet. */
export function withNewKnob(d: TuneDraft): TuneDraft {
  const taken = new Set(d.knobs.map((k) => k.name));
  return { ...d, knobs: [...d.knobs, newKnob(KNOB_NAMES.find((n) => !taken.has(n)) ?? OTHER_FLAG)] };
}

/** The daemon's defaults (crates/bench tune.rs). */
export function defaultTuneDraft(): TuneDraft {
  return {
    name: '',
    profile: '',
    knobs: [newKnob()],
    strategy: 'walk',
    objective: DEFAULT_OBJECTIVE,
    shape: '512:128',
    depth: 0,
    concurrency: 1,
    warmRuns: 5,
    api: 'chat',
    maxTrials: 24,
    floorReference: '',
    floorMode: 'bound',
    floorMax: 0.01,
  };
}

/** The draft with the first profile picked when none is (a profile picked stays). */
export function withFirstProfile(d: TuneDraft, profiles: readonly string[]): TuneDraft {
  return d.profile || !profiles[0] ? d : { ...d, profile: profiles[0] };
}

/** The knob's name as the daemon takes it: the name picked, or the flag typed. */
export function knobName(k: KnobDraft): string {
  return k.name === OTHER_FLAG ? k.flag.trim() : k.name;
}

/** Knobs whose values are lists per GPU (`3,1`, `8,6`): their values are split on `;`. */
const PER_GPU_KNOBS = ['tensor_split', 'gpu_expert_layers'];

/** Values are split on `;` for knobs whose values are per-GPU lists, on commas otherwise. */
export function listSeparator(name: string): string {
  return PER_GPU_KNOBS.includes(name) ? ';' : ',';
}

/** The values box's placeholder for a knob. */
export function valuesExample(k: KnobDraft): string {
  return EXAMPLES[knobName(k)] ?? 'off, ""';
}

/** How to type the knob's values, under its box. */
export function valuesHint(k: KnobDraft): string {
  const name = knobName(k);
  if (name === 'tensor_split') return 'Separate the values with ";": each value is a split like 3,1 (proportions per GPU, as the engine takes them).';
  if (name === 'gpu_expert_layers') return 'Separate the values with ";": each value is layers per GPU like 8,6 (GPU 0 keeps the experts of layers 0–7, GPU 1 of 8–13, the rest on the CPU).';
  if (k.name === OTHER_FLAG) return 'Separated by commas; each value is given after the flag. off leaves the flag out; "" gives the flag alone, without a value.';
  return 'Separated by commas; tried in this order (a walk goes upward through them).';
}

/** The typed list's values, trimmed; `""` is the empty value (an engine flag alone, without a
 *  value), any other empty entry is dropped. */
export function parseValues(text: string, name: string): string[] {
  return text
    .split(listSeparator(name))
    .map((v) => v.trim())
    .filter((v) => v !== '')
    .map((v) => (v === '""' || v === "''" ? '' : v));
}

function blank(v: number | null | undefined): v is null | undefined {
  return v == null || Number.isNaN(v);
}

/** How many values a range spells out (0 when it goes nowhere: the daemon says why). */
export function rangeCount(from: number, to: number, step: number): number {
  return step > 0 && from <= to ? Math.floor((to - from) / step) + 1 : 0;
}

/** The field a problem is about, so the form can mark it (a knob's by its row). */
export type TuneField = Exclude<keyof TuneDraft, 'knobs'> | `knob${number}`;

type Problem = { ok: false; field: TuneField; message: string };
type Built<T> = { ok: true; value: T } | Problem;

/** A knob row as the daemon takes it, with how many values it tries. */
export function buildKnob(k: KnobDraft, row: number): Built<{ knob: TuneKnob; count: number }> {
  const field: TuneField = `knob${row}`;
  const name = knobName(k);
  if (!name) return { ok: false, field, message: `knob ${row + 1}: type the engine flag, e.g. --draft-min` };
  if (k.mode === 'range') {
    if (blank(k.from) || blank(k.to) || blank(k.step)) return { ok: false, field, message: `${name}: give the range's from, to and step` };
    return { ok: true, value: { knob: { name, range: { from: k.from, to: k.to, step: k.step } }, count: rangeCount(k.from, k.to, k.step) } };
  }
  const values = parseValues(k.values, name);
  if (values.length === 0) return { ok: false, field, message: `${name}: give the values to try, e.g. ${valuesExample(k)}` };
  return { ok: true, value: { knob: { name, values }, count: values.length } };
}

/** Trials a search may need: the profile as saved, then each value (walk) or each combination (grid). */
export function trialsNeeded(strategy: TuneStrategy, counts: readonly number[]): number {
  if (counts.length === 0) return 1;
  return 1 + (strategy === 'grid' ? counts.reduce((a, n) => a * n, 1) : counts.reduce((a, n) => a + n, 0));
}

/** The trial count in words: "up to 7 trials: the profile as saved + 3 values of threads + 3 of
 *  ubatch" (walk) or "…: the profile as saved + 3 × 2 combinations" (grid). */
export function trialsText(strategy: TuneStrategy, knobs: readonly { name: string; count: number }[]): string {
  const n = trialsNeeded(
    strategy,
    knobs.map((k) => k.count),
  );
  const parts =
    strategy === 'grid'
      ? [`${knobs.map((k) => k.count).join(' × ')} combination${n - 1 === 1 ? '' : 's'}`]
      : knobs.map((k, i) => `${k.count}${i === 0 ? ` value${k.count === 1 ? '' : 's'} of` : ' of'} ${k.name}`);
  return `up to ${n} trial${n === 1 ? '' : 's'}: the profile as saved + ${parts.join(' + ')}`;
}

export type BuiltTune = { ok: true; body: NewTune; trials: number; text: string } | Problem;

/** The one workload point each trial measures. */
function buildBench(d: TuneDraft): Built<BenchSpec> {
  const shapes = parseShapes(d.shape);
  if (!shapes.ok) return { ok: false, field: 'shape', message: shapes.message };
  if (blank(d.concurrency)) return { ok: false, field: 'concurrency', message: 'give the streams at once, e.g. 1' };
  if (blank(d.warmRuns)) return { ok: false, field: 'warmRuns', message: 'give the warm runs per trial: at least 3 to measure the noise' };
  if (blank(d.depth)) return { ok: false, field: 'depth', message: 'give the context depth: 0 for an empty context' };
  return { ok: true, value: { shapes: shapes.value, depths: [d.depth], concurrency: [d.concurrency], warm_runs: d.warmRuns, api: d.api } };
}

/** The quality floor the draft asks for: none without a reference. */
function buildFloor(d: TuneDraft): Built<QualityFloor | null> {
  const reference = d.floorReference.trim();
  if (!reference) return { ok: true, value: null };
  if (d.floorMode === 'base') return { ok: true, value: { reference, max_mean_kld: null } };
  if (blank(d.floorMax) || d.floorMax <= 0) {
    return { ok: false, field: 'floorMax', message: 'give the highest mean KLD a trial may have, e.g. 0.01, or choose "no worse than as saved"' };
  }
  return { ok: true, value: { reference, max_mean_kld: d.floorMax } };
}

/** The request the draft makes and its trial count, or the first thing plainly missing. */
export function buildTune(d: TuneDraft): BuiltTune {
  if (!d.profile.trim()) return { ok: false, field: 'profile', message: 'pick the launch profile to tune: its engine is restarted for each trial' };
  if (d.knobs.length === 0) return { ok: false, field: 'knob0', message: 'add a knob to tune, e.g. threads with 4, 8, 16' };
  const knobs: { knob: TuneKnob; count: number }[] = [];
  for (const [row, k] of d.knobs.entries()) {
    const built = buildKnob(k, row);
    if (!built.ok) return built;
    knobs.push(built.value);
  }
  const bench = buildBench(d);
  if (!bench.ok) return bench;
  if (blank(d.maxTrials)) return { ok: false, field: 'maxTrials', message: 'give the most trials to run (1–64)' };
  const floor = buildFloor(d);
  if (!floor.ok) return floor;
  const spec: TuneSpec = { knobs: knobs.map((k) => k.knob), strategy: d.strategy, objective: d.objective, bench: bench.value, max_trials: d.maxTrials };
  if (floor.value) spec.quality_floor = floor.value;
  const name = d.name.trim();
  const counted = knobs.map((k) => ({ name: k.knob.name, count: k.count }));
  return {
    ok: true,
    body: { ...(name ? { name } : {}), profile: d.profile.trim(), spec },
    trials: trialsNeeded(
      d.strategy,
      counted.map((k) => k.count),
    ),
    text: trialsText(d.strategy, counted),
  };
}

/** The new profile's name a Save proposes: "qwen-tuned". */
export function tunedName(profile: string): string {
  return `${profile}-tuned`;
}
