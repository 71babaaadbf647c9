// The "New benchmark" form as data: what the user typed (a draft, lists as text like "1,2,4,8"),
// the defaults, the shape presets, and the request built from it — a speed benchmark, a quality
// probe or llama-bench — checked the way the daemon checks it, with its wording, so most mistakes
// show before Start. The daemon stays the authority: its 400 is shown as it says it.

import { llamaBenchSpec, probeSpec, speedSpec } from './format';
import type {
  BenchApi,
  BenchSpec,
  NewBenchmark,
  NewLlamaBench,
  NewQualityProbe,
  NewSpeedRun,
  PromptSource,
  RunKind,
  RunSummary,
  Shape,
  Slo,
  Target,
  TargetKind,
} from './types';

export type LoadMode = 'concurrency' | 'rate';

export interface BenchDraft {
  /** A speed benchmark (`serving`), a quality probe or llama-bench. */
  kind: RunKind;
  name: string;
  targetKind: TargetKind;
  instance: string;
  profile: string;
  gatewayModel: string;
  url: string;
  apiKey: string;
  urlModel: string;
  /** "256:512, 2048:64" */
  shapes: string;
  /** "0,32768,131072" */
  depths: string;
  loadMode: LoadMode;
  /** "1,2,4,8" */
  concurrency: string;
  /** "0.5,1,2" (requests per second) */
  rates: string;
  rateRequests: number | null;
  warmRuns: number | null;
  prompts: PromptSource;
  api: BenchApi;
  uniquePrefixes: boolean;
  forceOutput: boolean;
  temperature: number | null;
  sloTtftMs: number | null;
  sloTpotMs: number | null;
  sloE2eMs: number | null;
  /** A fraction: 0.6 is 60 %. */
  minAcceptance: number | null;
  seed: number | null;
  requestTimeoutS: number | null;
  /** The quality probe's room per reply, in tokens. */
  probeMaxTokens: number | null;
  /** Questions the probe asks at once. */
  probeConcurrency: number | null;
  /** Questions the probe generates (from `seed`). */
  probeCount: number | null;
  /** llama-bench's prompt sizes (pp tests), "512,2048". */
  llamaPrompts: string;
  /** llama-bench's generation sizes (tg tests), "128". */
  llamaGens: string;
  /** llama-bench's depths, "0,4096". */
  llamaDepths: string;
  /** Timed repetitions of each llama-bench test. */
  llamaRepetitions: number | null;
}

/** The field a problem is about, so the form can mark it. */
export type DraftField = keyof BenchDraft;

type DraftProblem = { ok: false; field: DraftField; message: string };

/** The request a draft makes: its steps and runs (a quality probe: no steps, its questions as
 *  runs), or the first problem with it. */
export type BuiltRequest<B extends NewBenchmark = NewBenchmark> = { ok: true; body: B; steps: number; runs: number } | DraftProblem;

/** Questions a quality probe generates by default (the daemon's `count`: 50 per category). */
export const PROBE_QUESTIONS = 250;

/** The daemon's defaults (crates/bench spec.rs). */
export function defaultDraft(): BenchDraft {
  return {
    kind: 'serving',
    name: '',
    targetKind: 'instance',
    instance: '',
    profile: '',
    gatewayModel: '',
    url: '',
    apiKey: '',
    urlModel: '',
    shapes: '256:512',
    depths: '0',
    loadMode: 'concurrency',
    concurrency: '1',
    rates: '',
    rateRequests: 32,
    warmRuns: 10,
    prompts: 'synthetic',
    api: 'chat',
    uniquePrefixes: true,
    forceOutput: true,
    temperature: 0,
    sloTtftMs: null,
    sloTpotMs: null,
    sloE2eMs: null,
    minAcceptance: 0.6,
    seed: 1,
    requestTimeoutS: 600,
    probeMaxTokens: 2048,
    probeConcurrency: 4,
    probeCount: PROBE_QUESTIONS,
    llamaPrompts: '512',
    llamaGens: '128',
    llamaDepths: '0',
    llamaRepetitions: 5,
  };
}

/** Warm runs of the quick check. */
export const QUICK_WARM_RUNS = 3;

/** "Quick check" on the target already chosen: one everyday shape (a 512-token prompt, a
 *  128-token reply), no context depth, one stream, a cold run and a few warm ones (seconds on a
 *  GPU, a minute or two for a small model on a CPU); the rest as the daemon's defaults. */
export function quickCheckDraft(d: BenchDraft): BenchDraft {
  const defaults = defaultDraft();
  return {
    ...defaults,
    targetKind: d.targetKind,
    instance: d.instance,
    profile: d.profile,
    gatewayModel: d.gatewayModel,
    url: d.url,
    apiKey: d.apiKey,
    urlModel: d.urlModel,
    name: 'Quick check',
    shapes: '512:128',
    depths: '0',
    concurrency: '1',
    warmRuns: QUICK_WARM_RUNS,
  };
}

/** The shapes users want one click away. */
export const SHAPE_PRESETS: { shape: string; label: string; note: string }[] = [
  { shape: '256:512', label: '256→512', note: 'short prompt, long answer' },
  { shape: '2048:512', label: '2048→512', note: 'a page of context' },
  { shape: '8192:512', label: '8192→512', note: 'long context' },
  { shape: '2048:64', label: '2048→64', note: 'prefill heavy' },
];

// The daemon's bounds, which keep a typo from queueing a week of work.
const MAX_TOKENS = 1 << 20;
const MAX_STREAMS = 1024;
const MAX_WARM_RUNS = 1000;
const MAX_STEPS = 1000;
const MAX_RATE_REQUESTS = MAX_STREAMS * 16;
const PROBE_MIN_TOKENS = 16;
const PROBE_MAX_TOKENS = 65_536;
const PROBE_MAX_CONCURRENCY = 64;
const PROBE_MIN_COUNT = 5;
const PROBE_MAX_COUNT = 5000;
/** The largest seed a JavaScript number holds exactly, the daemon's limit too. */
const PROBE_MAX_SEED = Number.MAX_SAFE_INTEGER;
const LLAMA_MAX_TOKENS = 1_000_000;
const LLAMA_MAX_VALUES = 32;
const LLAMA_MAX_REPETITIONS = 100;

function items(text: string): string[] {
  return text.split(/[\s,;]+/).filter((s) => s !== '');
}

/** "2048:512, 256 : 64" → each shape's text without spaces. */
function shapeItems(text: string): string[] {
  return items(text.replace(/\s*:\s*/g, ':'));
}

/** Whether the shape list holds this shape. */
export function hasShape(text: string, shape: string): boolean {
  return shapeItems(text).includes(shape);
}

/** The shape list with this shape added, or taken out when it is there. */
export function toggleShape(text: string, shape: string): string {
  const list = shapeItems(text);
  return (list.includes(shape) ? list.filter((s) => s !== shape) : [...list, shape]).join(', ');
}

type Parsed<T> = { ok: true; value: T } | { ok: false; message: string };

export function parseShapes(text: string): Parsed<Shape[]> {
  const shapes: Shape[] = [];
  for (const t of shapeItems(text)) {
    const m = /^(\d+):(\d+)$/.exec(t);
    if (!m) return { ok: false, message: `workload shape '${t}' is not PROMPT:OUTPUT tokens, e.g. 2048:512 (2048 prompt tokens, 512 output tokens)` };
    const shape = { prompt_tokens: Number(m[1]), output_tokens: Number(m[2]) };
    if (shape.prompt_tokens === 0 || shape.output_tokens === 0) {
      return { ok: false, message: `workload shape ${t}: prompt and output tokens must both be at least 1` };
    }
    if (shape.prompt_tokens > MAX_TOKENS || shape.output_tokens > MAX_TOKENS) {
      return { ok: false, message: `workload shape ${t}: at most ${MAX_TOKENS} tokens each` };
    }
    shapes.push(shape);
  }
  if (shapes.length === 0) return { ok: false, message: 'no workload shape: give at least one, e.g. 2048:512' };
  return { ok: true, value: shapes };
}

/** Whole numbers typed as "1,2,4,8"; `what` names them in the message. */
export function parseWholeNumbers(text: string, what: string, example: string): Parsed<number[]> {
  const values: number[] = [];
  for (const t of items(text)) {
    if (!/^\d+$/.test(t)) return { ok: false, message: `${what} '${t}' is not a whole number: type them like ${example}` };
    values.push(Number(t));
  }
  return { ok: true, value: values };
}

function parseRates(text: string): Parsed<number[]> {
  const values: number[] = [];
  for (const t of items(text)) {
    const r = Number(t);
    if (!Number.isFinite(r) || r <= 0) return { ok: false, message: `request rate ${t}: use a positive number of requests per second` };
    values.push(r);
  }
  if (values.length === 0) return { ok: false, message: 'no request rate: give requests per second like 0.5,1,2, or switch to concurrency' };
  return { ok: true, value: values };
}

function blank(v: number | null | undefined): v is null | undefined {
  return v == null || Number.isNaN(v);
}

function checkTarget(d: BenchDraft): { ok: true; target: Target } | DraftProblem {
  switch (d.targetKind) {
    case 'instance':
      if (!d.instance.trim()) {
        return { ok: false, field: 'instance', message: 'pick a ready instance: start one on the Engines page, or pick its profile to start it for the run' };
      }
      return { ok: true, target: { kind: 'instance', name: d.instance.trim() } };
    case 'profile':
      if (!d.profile.trim()) return { ok: false, field: 'profile', message: 'pick a launch profile: it is started for the run and stopped after' };
      return { ok: true, target: { kind: 'profile', name: d.profile.trim() } };
    case 'gateway':
      if (!d.gatewayModel.trim()) return { ok: false, field: 'gatewayModel', message: "the gateway target needs a model: a profile's name or alias" };
      return { ok: true, target: { kind: 'gateway', model: d.gatewayModel.trim() } };
    case 'url': {
      const url = d.url.trim();
      let parsed: URL;
      try {
        parsed = new URL(url);
      } catch {
        return { ok: false, field: 'url', message: `target URL '${url}' is not a URL: give the API's base, e.g. https://api.example.com/v1` };
      }
      if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
        return { ok: false, field: 'url', message: `target URL '${url}': use http:// or https://` };
      }
      if (!d.urlModel.trim()) return { ok: false, field: 'urlModel', message: 'the target URL needs a model name: the one its /v1/models lists' };
      const key = d.apiKey.trim();
      return { ok: true, target: { kind: 'url', url, model: d.urlModel.trim(), ...(key ? { api_key: key } : {}) } };
    }
  }
}

function sloOf(d: BenchDraft): { ok: true; slo: Slo | null } | DraftProblem {
  const slo: Slo = {};
  const targets: [keyof Slo, DraftField, number | null, string][] = [
    ['ttft_ms', 'sloTtftMs', d.sloTtftMs, 'TTFT'],
    ['tpot_ms', 'sloTpotMs', d.sloTpotMs, 'TPOT'],
    ['e2e_ms', 'sloE2eMs', d.sloE2eMs, 'E2E'],
  ];
  for (const [key, field, v, label] of targets) {
    if (blank(v)) continue;
    if (!(v > 0)) return { ok: false, field, message: `the ${label} target ${v} ms: use a positive number of milliseconds, or leave it blank for none` };
    slo[key] = v;
  }
  return { ok: true, slo: Object.keys(slo).length > 0 ? slo : null };
}

function checkTimeout(d: BenchDraft): DraftProblem | null {
  const timeout = d.requestTimeoutS;
  if (blank(timeout) || !Number.isInteger(timeout) || timeout < 1) {
    return { ok: false, field: 'requestTimeoutS', message: `request timeout ${blank(timeout) ? '(blank)' : `${timeout} s`}: use at least 1 s` };
  }
  return null;
}

/** The request the draft makes, by its kind, or the first problem with it (and the field to mark). */
export function buildRequest(d: BenchDraft): BuiltRequest {
  if (d.kind === 'quality') return buildProbeRequest(d);
  if (d.kind === 'llama_bench') return buildLlamaBenchRequest(d);
  return buildSpeedRequest(d);
}

/** One of llama-bench's size lists: whole numbers from `min`, at most 32 of them (it runs every
 *  combination). */
function llamaList(text: string, field: DraftField, what: string, min: number, example: string): { ok: true; value: number[] } | DraftProblem {
  const parsed = parseWholeNumbers(text, what, example);
  if (!parsed.ok) return { ok: false, field, message: parsed.message };
  const values = parsed.value;
  if (values.length === 0) return { ok: false, field, message: `no ${what}: give at least one, e.g. ${example}` };
  if (values.length > LLAMA_MAX_VALUES) return { ok: false, field, message: `${values.length} ${what}s: give at most ${LLAMA_MAX_VALUES} (llama-bench runs every combination)` };
  const bad = values.find((v) => v < min || v > LLAMA_MAX_TOKENS);
  if (bad != null) return { ok: false, field, message: `${what} ${bad}: use ${min} to ${LLAMA_MAX_TOKENS} tokens` };
  return { ok: true, value: values };
}

/** llama-bench's request: a launch profile (its model file and flags, no server), the pp and tg
 *  sizes, the depths and the repetitions; a test per size and depth. */
export function buildLlamaBenchRequest(d: BenchDraft): BuiltRequest<NewLlamaBench> {
  if (d.targetKind !== 'profile') return { ok: false, field: 'profile', message: "llama-bench runs a launch profile's model file with its flags: pick a profile" };
  const target = checkTarget(d);
  if (!target.ok) return target;
  const prompts = llamaList(d.llamaPrompts, 'llamaPrompts', 'prompt size', 1, '512');
  if (!prompts.ok) return prompts;
  const gens = llamaList(d.llamaGens, 'llamaGens', 'generation size', 1, '128');
  if (!gens.ok) return gens;
  const depths = llamaList(d.llamaDepths, 'llamaDepths', 'depth', 0, '0,4096');
  if (!depths.ok) return depths;
  const reps = d.llamaRepetitions;
  if (blank(reps) || !Number.isInteger(reps) || reps < 1 || reps > LLAMA_MAX_REPETITIONS) {
    return { ok: false, field: 'llamaRepetitions', message: `repetitions ${blank(reps) ? '(blank)' : reps}: use 1 to ${LLAMA_MAX_REPETITIONS} (5 is llama-bench's default)` };
  }
  const name = d.name.trim();
  const body: NewLlamaBench = {
    ...(name ? { name } : {}),
    kind: 'llama_bench',
    target: target.target,
    llama_bench: { prompt_tokens: prompts.value, gen_tokens: gens.value, depths: depths.value, repetitions: reps },
  };
  const tests = (prompts.value.length + gens.value.length) * depths.value.length;
  return { ok: true, body, steps: tests, runs: tests };
}

/** A quality probe's request: the target, the room per reply, how many questions at once, how
 *  many questions from which seed. */
export function buildProbeRequest(d: BenchDraft): BuiltRequest<NewQualityProbe> {
  const target = checkTarget(d);
  if (!target.ok) return target;
  const tokens = d.probeMaxTokens;
  if (blank(tokens) || !Number.isInteger(tokens) || tokens < PROBE_MIN_TOKENS || tokens > PROBE_MAX_TOKENS) {
    return {
      ok: false,
      field: 'probeMaxTokens',
      message: `quality probe max_tokens ${blank(tokens) ? '(blank)' : tokens}: use ${PROBE_MIN_TOKENS} to ${PROBE_MAX_TOKENS} (reasoning models need a few thousand)`,
    };
  }
  const concurrency = d.probeConcurrency;
  if (blank(concurrency) || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > PROBE_MAX_CONCURRENCY) {
    return { ok: false, field: 'probeConcurrency', message: `quality probe concurrency ${blank(concurrency) ? '(blank)' : concurrency}: use 1 to ${PROBE_MAX_CONCURRENCY}` };
  }
  const count = d.probeCount;
  if (blank(count) || !Number.isInteger(count) || count < PROBE_MIN_COUNT || count > PROBE_MAX_COUNT) {
    return {
      ok: false,
      field: 'probeCount',
      message: `quality probe count ${blank(count) ? '(blank)' : count}: use ${PROBE_MIN_COUNT} to ${PROBE_MAX_COUNT} questions (250, 50 per category, tells apart rates about 10 points apart)`,
    };
  }
  const seed = d.seed;
  if (blank(seed) || !Number.isInteger(seed) || seed < 0 || seed > PROBE_MAX_SEED) {
    return { ok: false, field: 'seed', message: `quality probe seed ${blank(seed) ? '(blank)' : seed}: use 0 to ${PROBE_MAX_SEED}` };
  }
  const timeout = checkTimeout(d);
  if (timeout) return timeout;
  const name = d.name.trim();
  const body: NewQualityProbe = {
    ...(name ? { name } : {}),
    kind: 'quality',
    target: target.target,
    probe: { max_tokens: tokens, concurrency, request_timeout_s: d.requestTimeoutS!, count, seed },
  };
  return { ok: true, body, steps: 0, runs: count };
}

/** What Start will do, in words: "2 steps × (1 cold + 2 warm) = 6 runs", a probe's
 *  "250 questions from seed 1, 4 at once, up to 2048 tokens each", llama-bench's "4 tests × 5
 *  repetitions". */
export function planText(built: Extract<BuiltRequest, { ok: true }>): string {
  const body = built.body;
  if (body.kind === 'quality') {
    return `${built.runs} questions from seed ${body.probe.seed ?? 1}, ${body.probe.concurrency ?? 4} at once, up to ${body.probe.max_tokens ?? 2048} tokens each`;
  }
  if (body.kind === 'llama_bench') {
    const reps = body.llama_bench.repetitions ?? 5;
    return `${built.runs} test${built.runs === 1 ? '' : 's'} × ${reps} repetition${reps === 1 ? '' : 's'}, inside the engine`;
  }
  const steps = `${built.steps} step${built.steps === 1 ? '' : 's'}`;
  return `${steps} × (1 cold + ${body.spec.warm_runs ?? 10} warm) = ${built.runs} run${built.runs === 1 ? '' : 's'}`;
}

/** A speed benchmark's request: shapes × depths × load points, each once cold and then warm. */
export function buildSpeedRequest(d: BenchDraft): BuiltRequest<NewSpeedRun> {
  const target = checkTarget(d);
  if (!target.ok) return target;
  const shapes = parseShapes(d.shapes);
  if (!shapes.ok) return { ok: false, field: 'shapes', message: shapes.message };
  const depths = parseWholeNumbers(d.depths, 'context depth', '0,32768,131072');
  if (!depths.ok) return { ok: false, field: 'depths', message: depths.message };
  if (depths.value.length === 0) return { ok: false, field: 'depths', message: 'no context depth: use 0 for an empty context' };
  const deep = depths.value.find((v) => v > MAX_TOKENS);
  if (deep != null) return { ok: false, field: 'depths', message: `context depth ${deep}: at most ${MAX_TOKENS} tokens` };

  const spec: BenchSpec = { shapes: shapes.value, depths: depths.value };
  let loads: number;
  if (d.loadMode === 'concurrency') {
    const c = parseWholeNumbers(d.concurrency, 'concurrency', '1,2,4,8');
    if (!c.ok) return { ok: false, field: 'concurrency', message: c.message };
    if (c.value.length === 0) return { ok: false, field: 'concurrency', message: 'no load point: give concurrency values (1,2,4,8) or request rates' };
    const bad = c.value.find((v) => v === 0 || v > MAX_STREAMS);
    if (bad != null) return { ok: false, field: 'concurrency', message: `concurrency ${bad}: use 1 to ${MAX_STREAMS} streams` };
    spec.concurrency = c.value;
    loads = c.value.length;
  } else {
    const r = parseRates(d.rates);
    if (!r.ok) return { ok: false, field: 'rates', message: r.message };
    const n = d.rateRequests;
    if (blank(n) || !Number.isInteger(n) || n < 1 || n > MAX_RATE_REQUESTS) {
      return { ok: false, field: 'rateRequests', message: `requests per rate run ${blank(n) ? '(blank)' : n}: use 1 to ${MAX_RATE_REQUESTS}` };
    }
    spec.rates = r.value;
    spec.rate_requests = n;
    loads = r.value.length;
  }

  const warm = d.warmRuns;
  if (blank(warm) || !Number.isInteger(warm) || warm < 0 || warm > MAX_WARM_RUNS) {
    return { ok: false, field: 'warmRuns', message: `warm runs ${blank(warm) ? '(blank)' : warm}: use 0 to ${MAX_WARM_RUNS}` };
  }
  const temperature = d.temperature;
  if (blank(temperature) || temperature < 0 || temperature > 2) {
    return { ok: false, field: 'temperature', message: `temperature ${blank(temperature) ? '(blank)' : temperature}: use 0 to 2` };
  }
  const acceptance = d.minAcceptance;
  if (blank(acceptance) || acceptance < 0 || acceptance > 1) {
    return { ok: false, field: 'minAcceptance', message: `minimum acceptance ${blank(acceptance) ? '(blank)' : acceptance}: use a fraction from 0 to 1 (0.6 = 60 %)` };
  }
  const timeoutProblem = checkTimeout(d);
  if (timeoutProblem) return timeoutProblem;
  const timeout = d.requestTimeoutS!;
  const seed = d.seed;
  if (blank(seed) || !Number.isInteger(seed) || seed < 0) {
    return { ok: false, field: 'seed', message: `seed ${blank(seed) ? '(blank)' : seed}: use a whole number from 0` };
  }
  const slo = sloOf(d);
  if (!slo.ok) return slo;

  const steps = shapes.value.length * depths.value.length * loads;
  if (steps > MAX_STEPS) {
    return { ok: false, field: 'shapes', message: `${steps} steps (shapes × depths × load points): at most ${MAX_STEPS}; split the benchmark` };
  }

  Object.assign(spec, {
    warm_runs: warm,
    prompts: d.prompts,
    api: d.api,
    unique_prefixes: d.uniquePrefixes,
    force_output: d.forceOutput,
    temperature,
    min_acceptance: acceptance,
    seed,
    request_timeout_s: timeout,
  } satisfies BenchSpec);
  if (slo.slo) spec.slo = slo.slo;

  const name = d.name.trim();
  const body: NewSpeedRun = { ...(name ? { name } : {}), target: target.target, spec };
  return { ok: true, body, steps, runs: steps * (1 + warm) };
}

function list(values: number[] | undefined, fallback: string): string {
  return values && values.length > 0 ? values.join(',') : fallback;
}

/** A past run's settings in the form, to run it again, by its kind (a URL target's key is never
 *  stored, so it is asked for again). */
export function draftFromRun(r: Pick<RunSummary, 'name' | 'kind' | 'target' | 'spec'>): BenchDraft {
  const d = defaultDraft();
  const t = r.target;
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  switch (t.kind) {
    case 'instance':
      Object.assign(d, { targetKind: 'instance', instance: str(t.name) });
      break;
    case 'profile':
      Object.assign(d, { targetKind: 'profile', profile: str(t.name) });
      break;
    case 'gateway':
      Object.assign(d, { targetKind: 'gateway', gatewayModel: str(t.model) });
      break;
    case 'url':
      Object.assign(d, { targetKind: 'url', url: str(t.url), urlModel: str(t.model) });
      break;
  }
  const llama = llamaBenchSpec(r);
  if (llama) {
    return {
      ...d,
      kind: 'llama_bench',
      name: r.name,
      targetKind: 'profile',
      // The daemon also takes an instance's name for its profile.
      profile: d.profile || str(t.name),
      llamaPrompts: list(llama.prompt_tokens, d.llamaPrompts),
      llamaGens: list(llama.gen_tokens, d.llamaGens),
      llamaDepths: list(llama.depths, d.llamaDepths),
      llamaRepetitions: llama.repetitions ?? d.llamaRepetitions,
    };
  }
  const probe = probeSpec(r);
  if (probe) {
    return {
      ...d,
      kind: 'quality',
      name: r.name,
      probeMaxTokens: probe.max_tokens ?? d.probeMaxTokens,
      probeConcurrency: probe.concurrency ?? d.probeConcurrency,
      probeCount: probe.count ?? d.probeCount,
      seed: probe.seed ?? d.seed,
      requestTimeoutS: probe.request_timeout_s ?? d.requestTimeoutS,
    };
  }
  const s: BenchSpec = speedSpec(r) ?? {};
  const rates = s.rates ?? [];
  return {
    ...d,
    kind: 'serving',
    name: r.name,
    shapes: s.shapes && s.shapes.length > 0 ? s.shapes.map((x) => `${x.prompt_tokens}:${x.output_tokens}`).join(', ') : d.shapes,
    depths: list(s.depths, d.depths),
    loadMode: rates.length > 0 ? 'rate' : 'concurrency',
    concurrency: list(s.concurrency, d.concurrency),
    rates: rates.join(','),
    rateRequests: s.rate_requests ?? d.rateRequests,
    warmRuns: s.warm_runs ?? d.warmRuns,
    prompts: s.prompts ?? d.prompts,
    api: s.api ?? d.api,
    uniquePrefixes: s.unique_prefixes ?? d.uniquePrefixes,
    forceOutput: s.force_output ?? d.forceOutput,
    temperature: s.temperature ?? d.temperature,
    sloTtftMs: s.slo?.ttft_ms ?? null,
    sloTpotMs: s.slo?.tpot_ms ?? null,
    sloE2eMs: s.slo?.e2e_ms ?? null,
    minAcceptance: s.min_acceptance ?? d.minAcceptance,
    seed: s.seed ?? d.seed,
    requestTimeoutS: s.request_timeout_s ?? d.requestTimeoutS,
  };
}
