// The "New benchmark" form as data: the defaults make the daemon's default benchmark, typed lists
// parse, mistakes are named in the daemon's words with the field to mark, presets toggle, and a
// past run's settings come back into the form.

import { describe, expect, it } from 'vitest';
import { probeSummary, summary } from '../../test/bench';
import { llamaSummary } from '../../test/llamaBench';
import { buildLlamaBenchRequest, buildProbeRequest, buildRequest, buildSpeedRequest, defaultDraft, draftFromRun, hasShape, planText, QUICK_WARM_RUNS, quickCheckDraft, toggleShape, type BenchDraft } from './draft';

const draft = (extra: Partial<BenchDraft> = {}): BenchDraft => ({ ...defaultDraft(), instance: 'qwen', ...extra });

function problem(d: BenchDraft): { field: string; message: string } {
  const r = buildRequest(d);
  if (r.ok) throw new Error('expected a problem');
  return { field: r.field, message: r.message };
}

describe('buildRequest', () => {
  it('makes the daemon’s default benchmark from the defaults', () => {
    const r = buildRequest(draft());
    expect(r).toEqual({
      ok: true,
      steps: 1,
      runs: 11,
      body: {
        target: { kind: 'instance', name: 'qwen' },
        spec: {
          shapes: [{ prompt_tokens: 256, output_tokens: 512 }],
          depths: [0],
          concurrency: [1],
          warm_runs: 10,
          prompts: 'synthetic',
          api: 'chat',
          unique_prefixes: true,
          force_output: true,
          temperature: 0,
          min_acceptance: 0.6,
          seed: 1,
          request_timeout_s: 600,
        },
      },
    });
  });

  it('reads typed lists and counts the steps and runs', () => {
    const r = buildSpeedRequest(draft({ name: '  sweep ', shapes: '2048:512, 8192 : 512', depths: '0,32768 131072', concurrency: '1,2,4,8', warmRuns: 3 }));
    if (!r.ok) throw new Error(r.message);
    expect(r.body.name).toBe('sweep');
    expect(r.body.spec.shapes).toEqual([
      { prompt_tokens: 2048, output_tokens: 512 },
      { prompt_tokens: 8192, output_tokens: 512 },
    ]);
    expect(r.body.spec.depths).toEqual([0, 32768, 131072]);
    expect(r.body.spec.concurrency).toEqual([1, 2, 4, 8]);
    expect(r.steps).toBe(24);
    expect(r.runs).toBe(24 * 4);
    expect(r.body.spec.rates).toBeUndefined();
  });

  it('sends rates and requests per run in rate mode, and SLO targets that are set', () => {
    const r = buildSpeedRequest(draft({ loadMode: 'rate', rates: '0.5, 1, 2', rateRequests: 64, sloTtftMs: 500, sloE2eMs: 20000 }));
    if (!r.ok) throw new Error(r.message);
    expect(r.body.spec.rates).toEqual([0.5, 1, 2]);
    expect(r.body.spec.rate_requests).toBe(64);
    expect(r.body.spec.concurrency).toBeUndefined();
    expect(r.body.spec.slo).toEqual({ ttft_ms: 500, e2e_ms: 20000 });
  });

  it('builds each kind of target; a URL’s key only when given', () => {
    const url = buildRequest(draft({ targetKind: 'url', url: 'https://api.example.com/v1', urlModel: 'gpt-4o-mini', apiKey: ' sk-1 ' }));
    expect(url.ok && url.body.target).toEqual({ kind: 'url', url: 'https://api.example.com/v1', model: 'gpt-4o-mini', api_key: 'sk-1' });
    const keyless = buildRequest(draft({ targetKind: 'url', url: 'http://10.0.0.2:8000/v1', urlModel: 'm' }));
    expect(keyless.ok && keyless.body.target).toEqual({ kind: 'url', url: 'http://10.0.0.2:8000/v1', model: 'm' });
    const gw = buildRequest(draft({ targetKind: 'gateway', gatewayModel: 'fast' }));
    expect(gw.ok && gw.body.target).toEqual({ kind: 'gateway', model: 'fast' });
    const profile = buildRequest(draft({ targetKind: 'profile', profile: 'qwen-big' }));
    expect(profile.ok && profile.body.target).toEqual({ kind: 'profile', name: 'qwen-big' });
  });

  it('names the field and the fix in the daemon’s words', () => {
    expect(problem(draft({ instance: '' }))).toMatchObject({ field: 'instance' });
    expect(problem(draft({ shapes: '2048x64' }))).toEqual({
      field: 'shapes',
      message: "workload shape '2048x64' is not PROMPT:OUTPUT tokens, e.g. 2048:512 (2048 prompt tokens, 512 output tokens)",
    });
    expect(problem(draft({ shapes: '' })).message).toBe('no workload shape: give at least one, e.g. 2048:512');
    expect(problem(draft({ shapes: '0:64' })).message).toBe('workload shape 0:64: prompt and output tokens must both be at least 1');
    expect(problem(draft({ depths: '' })).message).toBe('no context depth: use 0 for an empty context');
    expect(problem(draft({ depths: '0,2000000' })).message).toBe('context depth 2000000: at most 1048576 tokens');
    expect(problem(draft({ concurrency: '1,0' }))).toEqual({ field: 'concurrency', message: 'concurrency 0: use 1 to 1024 streams' });
    expect(problem(draft({ concurrency: '1,two' })).message).toBe("concurrency 'two' is not a whole number: type them like 1,2,4,8");
    expect(problem(draft({ loadMode: 'rate', rates: '-1' })).message).toBe('request rate -1: use a positive number of requests per second');
    expect(problem(draft({ loadMode: 'rate', rates: '1', rateRequests: 0 }))).toEqual({ field: 'rateRequests', message: 'requests per rate run 0: use 1 to 16384' });
    expect(problem(draft({ warmRuns: 1001 })).message).toBe('warm runs 1001: use 0 to 1000');
    expect(problem(draft({ temperature: 3 })).message).toBe('temperature 3: use 0 to 2');
    expect(problem(draft({ minAcceptance: 60 }))).toEqual({ field: 'minAcceptance', message: 'minimum acceptance 60: use a fraction from 0 to 1 (0.6 = 60 %)' });
    expect(problem(draft({ requestTimeoutS: 0 })).message).toBe('request timeout 0 s: use at least 1 s');
    expect(problem(draft({ sloTpotMs: -5 })).field).toBe('sloTpotMs');
    expect(problem(draft({ targetKind: 'url', url: 'ftp://x', urlModel: 'm' })).message).toBe("target URL 'ftp://x': use http:// or https://");
    expect(problem(draft({ targetKind: 'url', url: 'not a url', urlModel: 'm' })).field).toBe('url');
    expect(problem(draft({ targetKind: 'url', url: 'https://a/v1', urlModel: ' ' })).message).toBe('the target URL needs a model name: the one its /v1/models lists');
  });

  it('refuses more than a thousand steps', () => {
    const concurrency = Array.from({ length: 101 }, (_, i) => i + 1).join(',');
    expect(problem(draft({ shapes: '1:1, 2:2', depths: '0,1,2,3,4', concurrency })).message).toBe(
      '1010 steps (shapes × depths × load points): at most 1000; split the benchmark',
    );
  });
});

describe('shape presets', () => {
  it('toggle in and out of the typed list', () => {
    expect(hasShape('256 : 512', '256:512')).toBe(true);
    expect(toggleShape('256:512', '2048:64')).toBe('256:512, 2048:64');
    expect(toggleShape('256:512, 2048:64', '256:512')).toBe('2048:64');
    expect(toggleShape('', '8192:512')).toBe('8192:512');
  });
});

describe('draftFromRun', () => {
  it('puts a past run back in the form, which builds the same spec', () => {
    const spec = {
      shapes: [{ prompt_tokens: 2048, output_tokens: 64 }],
      depths: [0, 4096],
      rates: [1, 2],
      rate_requests: 16,
      warm_runs: 5,
      prompts: 'realistic' as const,
      api: 'completions' as const,
      unique_prefixes: false,
      force_output: true,
      temperature: 0.7,
      slo: { ttft_ms: 800 },
      min_acceptance: 0.5,
      seed: 7,
      request_timeout_s: 120,
    };
    const d = draftFromRun(summary(4, { name: 'baseline', target: { kind: 'gateway', model: 'fast' }, spec }));
    expect(d).toMatchObject({ name: 'baseline', targetKind: 'gateway', gatewayModel: 'fast', loadMode: 'rate', rates: '1,2', depths: '0,4096' });
    const r = buildSpeedRequest(d);
    if (!r.ok) throw new Error(r.message);
    expect(r.body.spec).toEqual({ ...spec, slo: { ttft_ms: 800 } });
  });
  it('asks for a URL target’s key again (it is never stored)', () => {
    const d = draftFromRun(summary(5, { target: { kind: 'url', url: 'https://a/v1', model: 'm', with_key: true } }));
    expect(d).toMatchObject({ targetKind: 'url', url: 'https://a/v1', urlModel: 'm', apiKey: '' });
  });
});

describe('the quality probe in the form', () => {
  const probe = (extra: Partial<BenchDraft> = {}) => draft({ kind: 'quality', ...extra });

  it('makes the daemon’s default probe: the target, the room per reply, questions at once, how many from which seed', () => {
    const r = buildRequest(probe({ name: ' q8 kv ' }));
    expect(r).toEqual({
      ok: true,
      steps: 0,
      runs: 250,
      body: {
        name: 'q8 kv',
        kind: 'quality',
        target: { kind: 'instance', name: 'qwen' },
        probe: { max_tokens: 2048, concurrency: 4, request_timeout_s: 600, count: 250, seed: 1 },
      },
    });
    // The speed fields are not checked for a probe: a broken shape list does not block it.
    expect(buildRequest(probe({ shapes: 'nonsense', concurrency: '0' })).ok).toBe(true);
  });
  it('checks the probe’s fields in the daemon’s words', () => {
    expect(problem(probe({ probeMaxTokens: 8 }))).toEqual({
      field: 'probeMaxTokens',
      message: 'quality probe max_tokens 8: use 16 to 65536 (reasoning models need a few thousand)',
    });
    expect(problem(probe({ probeMaxTokens: null })).message).toBe('quality probe max_tokens (blank): use 16 to 65536 (reasoning models need a few thousand)');
    expect(problem(probe({ probeConcurrency: 65 }))).toEqual({ field: 'probeConcurrency', message: 'quality probe concurrency 65: use 1 to 64' });
    expect(problem(probe({ probeConcurrency: 1.5 })).field).toBe('probeConcurrency');
    expect(problem(probe({ requestTimeoutS: 0 })).field).toBe('requestTimeoutS');
    expect(problem(probe({ instance: '' })).field).toBe('instance');
    expect(problem(probe({ probeCount: 4 }))).toEqual({
      field: 'probeCount',
      message: 'quality probe count 4: use 5 to 5000 questions (250, 50 per category, tells apart rates about 10 points apart)',
    });
    expect(problem(probe({ probeCount: null })).field).toBe('probeCount');
    expect(problem(probe({ seed: -1 })).message).toBe('quality probe seed -1: use 0 to 9007199254740991');
    expect(problem(probe({ seed: 2 ** 60 })).field).toBe('seed');
  });
  it('says what Start will do, by kind', () => {
    const p = buildProbeRequest(probe({ probeMaxTokens: 24, probeConcurrency: 2, probeCount: 30, seed: 9 }));
    if (!p.ok) throw new Error(p.message);
    expect(planText(p)).toBe('30 questions from seed 9, 2 at once, up to 24 tokens each');
    const s = buildRequest(draft({ concurrency: '1,2', warmRuns: 2 }));
    if (!s.ok) throw new Error(s.message);
    expect(planText(s)).toBe('2 steps × (1 cold + 2 warm) = 6 runs');
  });
  it('puts a past probe back in the form, which builds the same probe', () => {
    const run = probeSummary(7, [], {
      name: 'tiny',
      target: { kind: 'profile', name: 'tiny' },
      spec: { max_tokens: 4096, concurrency: 8, request_timeout_s: 900, count: 100, seed: 42 },
    });
    const d = draftFromRun(run);
    expect(d).toMatchObject({
      kind: 'quality',
      name: 'tiny',
      targetKind: 'profile',
      profile: 'tiny',
      probeMaxTokens: 4096,
      probeConcurrency: 8,
      requestTimeoutS: 900,
      probeCount: 100,
      seed: 42,
    });
    // The speed fields are the defaults, not read from the probe's spec.
    expect(d.shapes).toBe(defaultDraft().shapes);
    const r = buildRequest(d);
    if (!r.ok) throw new Error(r.message);
    expect(r.body).toEqual({
      name: 'tiny',
      kind: 'quality',
      target: { kind: 'profile', name: 'tiny' },
      probe: { max_tokens: 4096, concurrency: 8, request_timeout_s: 900, count: 100, seed: 42 },
    });
  });
  it('puts a past speed benchmark back as a speed benchmark', () => {
    expect(draftFromRun(summary(3, { spec: { warm_runs: 2 } }))).toMatchObject({ kind: 'serving', warmRuns: 2, probeMaxTokens: 2048 });
  });
});

describe('llama-bench in the form', () => {
  const llama = (extra: Partial<BenchDraft> = {}) => draft({ kind: 'llama_bench', targetKind: 'profile', profile: 'qwen', ...extra });

  it('makes llama-bench’s default run against the profile: one pp and one tg test, 5 repetitions', () => {
    expect(buildRequest(llama())).toEqual({
      ok: true,
      steps: 2,
      runs: 2,
      body: { kind: 'llama_bench', target: { kind: 'profile', name: 'qwen' }, llama_bench: { prompt_tokens: [512], gen_tokens: [128], depths: [0], repetitions: 5 } },
    });
    // The speed fields are not checked for llama-bench.
    expect(buildRequest(llama({ shapes: 'nonsense', requestTimeoutS: 0 })).ok).toBe(true);
  });
  it('reads typed lists and counts a test per size and depth', () => {
    const r = buildLlamaBenchRequest(llama({ name: ' tiny lb ', llamaPrompts: '16', llamaGens: '8', llamaDepths: '0, 16', llamaRepetitions: 2 }));
    if (!r.ok) throw new Error(r.message);
    expect(r.body).toEqual({ name: 'tiny lb', kind: 'llama_bench', target: { kind: 'profile', name: 'qwen' }, llama_bench: { prompt_tokens: [16], gen_tokens: [8], depths: [0, 16], repetitions: 2 } });
    expect(r.runs).toBe(4);
    expect(planText(r)).toBe('4 tests × 2 repetitions, inside the engine');
  });
  it('takes a profile only, and names the field and the fix in the daemon’s words', () => {
    expect(problem(llama({ targetKind: 'instance' }))).toEqual({ field: 'profile', message: "llama-bench runs a launch profile's model file with its flags: pick a profile" });
    expect(problem(llama({ profile: '' })).field).toBe('profile');
    expect(problem(llama({ llamaPrompts: '' }))).toEqual({ field: 'llamaPrompts', message: 'no prompt size: give at least one, e.g. 512' });
    expect(problem(llama({ llamaPrompts: '0' }))).toEqual({ field: 'llamaPrompts', message: 'prompt size 0: use 1 to 1000000 tokens' });
    expect(problem(llama({ llamaGens: '12x' })).message).toBe("generation size '12x' is not a whole number: type them like 128");
    expect(problem(llama({ llamaDepths: '0,2000000' }))).toEqual({ field: 'llamaDepths', message: 'depth 2000000: use 0 to 1000000 tokens' });
    const many = Array.from({ length: 33 }, (_, i) => i).join(',');
    expect(problem(llama({ llamaDepths: many })).message).toBe('33 depths: give at most 32 (llama-bench runs every combination)');
    expect(problem(llama({ llamaRepetitions: 0 }))).toEqual({ field: 'llamaRepetitions', message: "repetitions 0: use 1 to 100 (5 is llama-bench's default)" });
    expect(problem(llama({ llamaRepetitions: null })).message).toBe("repetitions (blank): use 1 to 100 (5 is llama-bench's default)");
  });
  it('puts a past llama-bench run back in the form, which builds the same request', () => {
    const run = llamaSummary(9, { name: 'lb', spec: { prompt_tokens: [16, 32], gen_tokens: [8], depths: [0, 16], repetitions: 2 } });
    const d = draftFromRun(run);
    expect(d).toMatchObject({ kind: 'llama_bench', name: 'lb', targetKind: 'profile', profile: 'qwen', llamaPrompts: '16,32', llamaGens: '8', llamaDepths: '0,16', llamaRepetitions: 2 });
    const r = buildRequest(d);
    if (!r.ok) throw new Error(r.message);
    expect(r.body).toEqual({ name: 'lb', kind: 'llama_bench', target: { kind: 'profile', name: 'qwen' }, llama_bench: { prompt_tokens: [16, 32], gen_tokens: [8], depths: [0, 16], repetitions: 2 } });
    // llama-bench's defaults where the stored spec leaves a field out.
    expect(draftFromRun(llamaSummary(9, { spec: {} }))).toMatchObject({ llamaPrompts: '512', llamaGens: '128', llamaDepths: '0', llamaRepetitions: 5 });
  });
});

describe('quick check', () => {
  it('is one shape, one stream and a few warm runs on the target already chosen', () => {
    const chosen = draft({ targetKind: 'instance', instance: 'gemma', shapes: '2048:512, 256:64', depths: '0,32768', concurrency: '1,2,4,8', warmRuns: 10, name: 'mine' });
    const quick = quickCheckDraft(chosen);
    expect(quick.instance).toBe('gemma');
    expect(quick.targetKind).toBe('instance');
    const r = buildRequest(quick);
    if (!r.ok) throw new Error(r.message);
    expect(r.steps).toBe(1);
    expect(r.runs).toBe(1 + QUICK_WARM_RUNS);
    expect(r.body.kind ?? 'serving').toBe('serving');
    expect(r.body.name).toBe('Quick check');
    expect(planText(r)).toBe(`1 step × (1 cold + ${QUICK_WARM_RUNS} warm) = ${1 + QUICK_WARM_RUNS} runs`);
  });
  it('turns a quality probe or llama-bench draft into a speed run', () => {
    expect(quickCheckDraft(draft({ kind: 'quality' })).kind).toBe('serving');
  });
  it('needs a target', () => {
    expect(buildRequest(quickCheckDraft(draft({ instance: '' }))).ok).toBe(false);
  });
});
