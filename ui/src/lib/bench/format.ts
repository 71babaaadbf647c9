// How the Benchmarks page writes a run's parts: step points ("2048:512 @ depth 32768, 8 streams",
// as the daemon's reports write them), targets, statuses and progress, a quality probe's pass
// count, and the figures (tok/s, spreads, CV, fractions, ratios). `null` renders as an em dash.
// A run's spec is read by its kind: a speed benchmark's BenchSpec, a quality probe's ProbeSpec or
// llama-bench's LlamaBenchSpec.

import { MISSING } from '../format/units';
import type { BenchSpec, LlamaBenchSpec, Load, Point, ProbeSpec, QualitySummary, RunStatus, RunSummary, Shape, Stats, TargetView } from './types';

/** A quality probe (else a speed benchmark). */
export function isQuality(r: Pick<RunSummary, 'kind'>): boolean {
  return r.kind === 'quality';
}

/** A KLD run: a profile's next-token distributions against a quality reference's. */
export function isKld(r: Pick<RunSummary, 'kind'>): boolean {
  return r.kind === 'kld';
}

/** A llama-bench run (llama.cpp's own benchmark inside the engine). */
export function isLlamaBench(r: Pick<RunSummary, 'kind'>): boolean {
  return r.kind === 'llama_bench';
}

/** A speed benchmark whose prompt lengths were estimated: said only once the engine's tokenizer
 *  was asked (a run starts neither exact nor estimated). */
export function promptsEstimated(r: Pick<RunSummary, 'kind' | 'exact_prompts' | 'prompts_known'>): boolean {
  if (isQuality(r) || isLlamaBench(r) || isKld(r)) return false;
  return (r.prompts_known ?? true) && !r.exact_prompts;
}

/** A speed benchmark's spec; null for a quality probe, llama-bench or a KLD run. */
export function speedSpec(r: Pick<RunSummary, 'kind' | 'spec'>): BenchSpec | null {
  return isQuality(r) || isLlamaBench(r) || isKld(r) ? null : (r.spec as BenchSpec);
}

/** llama-bench's spec; null for the other kinds. */
export function llamaBenchSpec(r: Pick<RunSummary, 'kind' | 'spec'>): LlamaBenchSpec | null {
  return isLlamaBench(r) ? (r.spec as LlamaBenchSpec) : null;
}

/** A quality probe's spec; null for a speed benchmark. */
export function probeSpec(r: Pick<RunSummary, 'kind' | 'spec'>): ProbeSpec | null {
  return isQuality(r) ? (r.spec as ProbeSpec) : null;
}

export function shapeLabel(s: Shape): string {
  return `${s.prompt_tokens}:${s.output_tokens}`;
}

export function isRate(load: Load): load is { rate: number } {
  return 'rate' in load;
}

/** The load's number: streams, or requests per second. */
export function loadValue(load: Load): number {
  return isRate(load) ? load.rate : load.concurrency;
}

/** "1 stream", "8 streams", "2 req/s". */
export function loadLabel(load: Load): string {
  if (isRate(load)) return `${load.rate} req/s`;
  return `${load.concurrency} stream${load.concurrency === 1 ? '' : 's'}`;
}

/** "2048:512 @ depth 32768, 8 streams"; a depth of 0 is left out. */
export function pointLabel(p: Point): string {
  const depth = p.depth > 0 ? ` @ depth ${p.depth}` : '';
  return `${shapeLabel(p.shape)}${depth}, ${loadLabel(p.load)}`;
}

/** Same shape, depth and load: the same key. */
export function pointKey(p: Point): string {
  const load = isRate(p.load) ? `r${p.load.rate}` : `c${p.load.concurrency}`;
  return `${shapeLabel(p.shape)}@${p.depth}/${load}`;
}

function text(v: unknown): string | null {
  return typeof v === 'string' && v !== '' ? v : null;
}

/** The run's target in a few words: "qwen", "profile qwen", "gateway/qwen", "gpt-4o at https://…/v1". */
export function targetLabel(t: TargetView): string {
  switch (t.kind) {
    case 'instance':
      return text(t.name) ?? 'an instance';
    case 'profile':
      return `profile ${text(t.name) ?? '?'}`;
    case 'gateway':
      return `gateway/${text(t.model) ?? '?'}`;
    case 'url':
      return `${text(t.model) ?? '?'} at ${text(t.url) ?? '?'}`;
    default:
      return JSON.stringify(t);
  }
}

export type StatusTone = 'info' | 'ok' | 'bad' | 'warn';

export function statusTone(status: RunStatus | (string & {})): StatusTone {
  switch (status) {
    case 'running':
      return 'info';
    case 'done':
      return 'ok';
    case 'failed':
      return 'bad';
    default:
      return 'warn';
  }
}

/** "12 / 44 runs"; a quality probe's "12 / 30 answered"; llama-bench's "0 / 4 tests"; a KLD
 *  run's "llama-perplexity running" (it reports nothing before its end). */
export function progressText(r: Pick<RunSummary, 'runs_done' | 'runs_total'> & Partial<Pick<RunSummary, 'kind'>>): string {
  if (r.kind === 'quality') return `${r.runs_done} / ${r.runs_total} answered`;
  if (r.kind === 'llama_bench') return `${r.runs_done} / ${r.runs_total} test${r.runs_total === 1 ? '' : 's'}`;
  if (r.kind === 'kld') return r.runs_done >= r.runs_total ? 'measured' : 'llama-perplexity running';
  return `${r.runs_done} / ${r.runs_total} run${r.runs_total === 1 ? '' : 's'}`;
}

/** Share of the runs done, 0–100. */
export function progressPercent(r: Pick<RunSummary, 'runs_done' | 'runs_total'>): number {
  return r.runs_total > 0 ? Math.min(100, (r.runs_done / r.runs_total) * 100) : 0;
}

/** A pass rate as a percentage: 0.4 → "40 %", 1 / 30 → "3 %". */
export function formatPassRate(rate: number | null | undefined): string {
  return formatFraction(rate);
}

/** A quality probe's headline, as the CLI writes it: "passed 12 of 30: 40 % (95 % interval
 *  24–58 %)", of the answers graded so far, with failed requests counted apart. */
export function qualityHeadline(q: QualitySummary | null | undefined): string {
  if (!q || q.answered === 0) return 'no answer yet';
  const percent = (x: number) => `${Math.round(x * 100)}`;
  const interval = q.interval ? ` (95 % interval ${percent(q.interval.low)}–${percent(q.interval.high)} %)` : '';
  const errors = q.errors > 0 ? `; ${q.errors} failed request${q.errors === 1 ? '' : 's'} not counted` : '';
  return `passed ${q.passed} of ${q.graded}: ${formatPassRate(q.pass_rate)}${interval}${errors}`;
}

/** The list's headline: the first step's median aggregate and per-stream tok/s (warm runs). */
export function headline(r: Pick<RunSummary, 'steps'>): { point: Point; aggregate: number | null; stream: number | null } | null {
  const first = r.steps[0];
  return first ? { point: first.point, aggregate: first.aggregate_tps, stream: first.stream_tps } : null;
}

function finite(v: number | null | undefined): v is number {
  return v != null && Number.isFinite(v);
}

/** Tokens per second without the unit (the column says it): 312.7 → "313", 45.23 → "45.2". */
export function formatTps(v: number | null | undefined): string {
  if (!finite(v)) return MISSING;
  if (v === 0) return '0';
  const digits = Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 1 ? 1 : 2;
  return v.toFixed(digits);
}

/** The middle 80 % of a figure: "40.1–44.0". */
export function formatSpread(s: Stats | null | undefined, format: (v: number) => string = formatTps): string {
  if (!s) return MISSING;
  return `${format(s.p10)}–${format(s.p90)}`;
}

/** Coefficient of variation as a percentage: 0.0213 → "2.1 %". */
export function formatCv(cv: number | null | undefined): string {
  if (!finite(cv)) return MISSING;
  return `${(cv * 100).toFixed(cv < 0.1 ? 1 : 0)} %`;
}

/** A fraction as a percentage: 0.734 → "73 %". */
export function formatFraction(f: number | null | undefined): string {
  if (!finite(f)) return MISSING;
  return `${Math.round(f * 100)} %`;
}

/** Requests per second: 0.5234 → "0.52 req/s". */
export function formatRps(v: number | null | undefined): string {
  if (!finite(v)) return MISSING;
  return `${v.toFixed(v >= 10 ? 1 : 2)} req/s`;
}

/** A ratio to a baseline: 1.234 → "1.23×". */
export function formatRatio(r: number | null | undefined): string {
  if (!finite(r)) return MISSING;
  return `${r.toFixed(2)}×`;
}

/** A file name for a run's export or chart: "benchmark-12-qwen-8-streams.csv". */
export function runFileName(r: Pick<RunSummary, 'id' | 'name'>, ext: string, part?: string): string {
  const slug = (s: string) => s.replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-+|-+$/g, '').slice(0, 60);
  const name = slug(r.name);
  const what = part ? slug(part) : '';
  return [`benchmark-${r.id}`, name, what].filter((s) => s !== '').join('-') + `.${ext}`;
}

/** A probe's settings in words: "30 questions at temperature 0, up to 2048 tokens per reply, 4 at
 *  once, 600 s per request" (the daemon's defaults where the spec leaves them out). */
export function probeText(s: ProbeSpec, questions: number): string {
  return [
    `${questions} question${questions === 1 ? '' : 's'} at temperature 0`,
    `up to ${s.max_tokens ?? 2048} tokens per reply`,
    `${s.concurrency ?? 4} at once`,
    `${s.request_timeout_s ?? 600} s per request`,
  ].join(', ');
}

/** llama-bench's settings in words: "pp 512, tg 128 at depth 0 and 4096, 5 repetitions each,
 *  inside the engine (no HTTP)" (llama-bench's defaults where the spec leaves them out). */
export function llamaBenchText(s: LlamaBenchSpec): string {
  const list = (v: number[] | undefined, fallback: number) => (v && v.length > 0 ? v : [fallback]).join(', ');
  const depths = s.depths && s.depths.length > 0 ? s.depths : [0];
  const reps = s.repetitions ?? 5;
  const at = depths.length === 1 ? `depth ${depths[0]}` : `depths ${depths.slice(0, -1).join(', ')} and ${depths[depths.length - 1]}`;
  return `pp ${list(s.prompt_tokens, 512)}, tg ${list(s.gen_tokens, 128)} at ${at}, ${reps} repetition${reps === 1 ? '' : 's'} each, inside the engine (no HTTP)`;
}

/** A KLD run's settings in words: "KL divergence against reference ab12 (llama-perplexity …)". */
export function kldText(spec: unknown): string {
  const ref = typeof spec === 'object' && spec != null ? (spec as { reference?: unknown }).reference : null;
  return `KL divergence against reference ${typeof ref === 'string' ? ref : '?'} (llama-perplexity on the profile's placement)`;
}

/** A run's settings in words, by its kind. */
export function runSpecText(r: Pick<RunSummary, 'kind' | 'spec' | 'runs_total'>): string {
  if (isKld(r)) return kldText(r.spec);
  const probe = probeSpec(r);
  if (probe) return probeText(probe, r.runs_total);
  const llama = llamaBenchSpec(r);
  return llama ? llamaBenchText(llama) : specText(r.spec as BenchSpec);
}

/** The spec's settings besides the steps, in words: "10 warm runs, synthetic prompts, chat API, …". */
export function specText(s: BenchSpec): string {
  const parts: string[] = [];
  const warm = s.warm_runs ?? 10;
  parts.push(`${warm} warm run${warm === 1 ? '' : 's'} per step`);
  if (s.rates && s.rates.length > 0) parts.push(`${s.rate_requests ?? 32} requests per run`);
  parts.push(`${s.prompts ?? 'synthetic'} prompts`);
  parts.push(s.api === 'completions' ? 'completions API' : 'chat API');
  if (s.unique_prefixes === false) parts.push('shared prefixes');
  parts.push(s.force_output === false ? 'output may end early' : 'output length forced');
  parts.push(`temperature ${s.temperature ?? 0}`);
  const slo = s.slo ?? {};
  const targets = [
    slo.ttft_ms != null ? `TTFT ≤ ${slo.ttft_ms} ms` : null,
    slo.tpot_ms != null ? `TPOT ≤ ${slo.tpot_ms} ms` : null,
    slo.e2e_ms != null ? `E2E ≤ ${slo.e2e_ms} ms` : null,
  ].filter((t) => t != null);
  if (targets.length > 0) parts.push(`goodput targets ${targets.join(', ')}`);
  parts.push(`seed ${s.seed ?? 1}`);
  return parts.join(', ');
}
