// How runs, steps and figures are written: point labels as the daemon's reports write them,
// targets, progress, the headline, tok/s, spreads, CV, ratios, file names and the spec in words.

import { describe, expect, it } from 'vitest';
import { digest, point, probeAnswers, probeSummary, stats, summary } from '../../test/bench';
import { llamaSummary } from '../../test/llamaBench';
import {
  isLlamaBench,
  llamaBenchSpec,
  llamaBenchText,
  formatCv,
  formatPassRate,
  isQuality,
  probeSpec,
  probeText,
  qualityHeadline,
  runSpecText,
  speedSpec,
  formatFraction,
  formatRatio,
  formatRps,
  formatSpread,
  formatTps,
  headline,
  loadLabel,
  pointKey,
  pointLabel,
  progressPercent,
  progressText,
  promptsEstimated,
  runFileName,
  specText,
  statusTone,
  targetLabel,
} from './format';

describe('points', () => {
  it('are written like the daemon writes them', () => {
    expect(pointLabel(point(2048, 512, 32768, { concurrency: 8 }))).toBe('2048:512 @ depth 32768, 8 streams');
    expect(pointLabel(point(256, 512))).toBe('256:512, 1 stream');
    expect(pointLabel(point(2048, 512, 0, { rate: 2 }))).toBe('2048:512, 2 req/s');
    expect(loadLabel({ rate: 0.5 })).toBe('0.5 req/s');
  });
  it('match by shape, depth and load', () => {
    expect(pointKey(point(2048, 512, 0, { concurrency: 8 }))).toBe(pointKey(point(2048, 512, 0, { concurrency: 8 })));
    expect(pointKey(point(2048, 512, 0, { concurrency: 8 }))).not.toBe(pointKey(point(2048, 512, 0, { rate: 8 })));
    expect(pointKey(point(2048, 512, 0))).not.toBe(pointKey(point(2048, 512, 4096)));
  });
});

describe('runs in a list', () => {
  it('name their target in a few words, never a key', () => {
    expect(targetLabel({ kind: 'instance', name: 'qwen' })).toBe('qwen');
    expect(targetLabel({ kind: 'profile', name: 'qwen' })).toBe('profile qwen');
    expect(targetLabel({ kind: 'gateway', model: 'gpt-4o-mini' })).toBe('gateway/gpt-4o-mini');
    expect(targetLabel({ kind: 'url', url: 'https://api.example.com/v1', model: 'm', with_key: true })).toBe('m at https://api.example.com/v1');
    expect(targetLabel({ kind: 'socket' })).toBe('{"kind":"socket"}');
  });
  it('show progress and a tone per status', () => {
    expect(progressText({ runs_done: 12, runs_total: 44 })).toBe('12 / 44 runs');
    expect(progressPercent({ runs_done: 11, runs_total: 44 })).toBe(25);
    expect(progressPercent({ runs_done: 0, runs_total: 0 })).toBe(0);
    expect(statusTone('running')).toBe('info');
    expect(statusTone('done')).toBe('ok');
    expect(statusTone('failed')).toBe('bad');
    expect(statusTone('cancelled')).toBe('warn');
    expect(statusTone('aborted')).toBe('warn');
  });
  it('headline the first step', () => {
    const r = summary(1, { steps: [digest(point(256, 512), { aggregate_tps: 41.2, stream_tps: 40.9 }), digest(point(256, 512, 0, { concurrency: 8 }))] });
    expect(headline(r)).toEqual({ point: point(256, 512), aggregate: 41.2, stream: 40.9 });
    expect(headline(summary(2, { steps: [] }))).toBeNull();
  });
});

describe('figures', () => {
  it('write tok/s with fewer decimals as they grow, and a dash for none', () => {
    expect(formatTps(312.7)).toBe('313');
    expect(formatTps(45.23)).toBe('45.2');
    expect(formatTps(0.424)).toBe('0.42');
    expect(formatTps(0)).toBe('0');
    expect(formatTps(null)).toBe('—');
    expect(formatTps(Number.NaN)).toBe('—');
  });
  it('write the spread, the noise and shares', () => {
    expect(formatSpread(stats([40, 41, 42, 43, 44]))).toBe('40.4–43.6');
    expect(formatSpread(null)).toBe('—');
    expect(formatCv(0.0213)).toBe('2.1 %');
    expect(formatCv(0.25)).toBe('25 %');
    expect(formatFraction(0.734)).toBe('73 %');
    expect(formatRps(0.5234)).toBe('0.52 req/s');
    expect(formatRatio(1.234)).toBe('1.23×');
    expect(formatRatio(null)).toBe('—');
  });
  it('name files after the run', () => {
    expect(runFileName({ id: 12, name: 'qwen 8B / Q4' }, 'csv')).toBe('benchmark-12-qwen-8B-Q4.csv');
    expect(runFileName({ id: 12, name: '///' }, 'md')).toBe('benchmark-12.md');
    expect(runFileName({ id: 3, name: 'qwen' }, 'png', 'tps-load')).toBe('benchmark-3-qwen-tps-load.png');
  });
  it('say the settings in words, defaults filled in', () => {
    expect(specText({})).toBe('10 warm runs per step, synthetic prompts, chat API, output length forced, temperature 0, seed 1');
    expect(specText({ warm_runs: 1, rates: [2], rate_requests: 64, prompts: 'realistic', api: 'completions', unique_prefixes: false, force_output: false, slo: { ttft_ms: 500, e2e_ms: 9000 } })).toBe(
      '1 warm run per step, 64 requests per run, realistic prompts, completions API, shared prefixes, output may end early, temperature 0, goodput targets TTFT ≤ 500 ms, E2E ≤ 9000 ms, seed 1',
    );
  });
});

describe('quality probes', () => {
  it('are told from speed benchmarks by their kind, and each spec is read by it', () => {
    const probe = probeSummary(2);
    const speed = summary(1, { spec: { warm_runs: 3 } });
    expect(isQuality(probe)).toBe(true);
    expect(isQuality(speed)).toBe(false);
    expect(probeSpec(probe)).toEqual({ max_tokens: 2048, concurrency: 4, request_timeout_s: 600, count: 30, seed: 1 });
    expect(speedSpec(probe)).toBeNull();
    expect(speedSpec(speed)).toEqual({ warm_runs: 3 });
    expect(probeSpec(speed)).toBeNull();
  });
  it('show their progress as questions answered', () => {
    expect(progressText({ kind: 'quality', runs_done: 12, runs_total: 30 })).toBe('12 / 30 answered');
    expect(progressText({ kind: 'serving', runs_done: 1, runs_total: 1 })).toBe('1 / 1 run');
  });
  it('headline their passes out of the answers graded, with the 95 % interval, failed requests apart', () => {
    expect(qualityHeadline(probeSummary(1, probeAnswers({ arithmetic: 6, units: 6 })).quality)).toBe('passed 12 of 30: 40 % (95 % interval 25–58 %)');
    expect(qualityHeadline(probeSummary(1, probeAnswers({}, 30)).quality)).toBe('passed 0 of 30: 0 % (95 % interval 0–11 %)');
    expect(qualityHeadline(probeSummary(1, probeAnswers({ arithmetic: 1 }, 3)).quality)).toBe('passed 1 of 3: 33 % (95 % interval 6–79 %)');
    const failing = probeAnswers({ arithmetic: 5 }, 10).map((a, i) => (i >= 8 ? { ...a, error: 'HTTP 503', pass: false, got: null } : a));
    expect(qualityHeadline(probeSummary(1, failing).quality)).toBe('passed 5 of 8: 63 % (95 % interval 31–86 %); 2 failed requests not counted');
    expect(qualityHeadline(probeSummary(1, []).quality)).toBe('no answer yet');
    expect(qualityHeadline(null)).toBe('no answer yet');
    expect(formatPassRate(1 / 30)).toBe('3 %');
    expect(formatPassRate(null)).toBe('—');
  });
  it('say their settings in words, by kind', () => {
    expect(probeText({}, 30)).toBe('30 questions at temperature 0, up to 2048 tokens per reply, 4 at once, 600 s per request');
    expect(runSpecText(probeSummary(1, [], { spec: { max_tokens: 24, concurrency: 2, request_timeout_s: 60 } }))).toBe(
      '30 questions at temperature 0, up to 24 tokens per reply, 2 at once, 60 s per request',
    );
    expect(runSpecText(summary(1, { spec: {} }))).toBe(specText({}));
  });
});

describe('llama-bench runs', () => {
  it('are told apart by their kind, and their spec is read by it', () => {
    const run = llamaSummary(3);
    expect(isLlamaBench(run)).toBe(true);
    expect(isLlamaBench(summary(1))).toBe(false);
    expect(isQuality(run)).toBe(false);
    expect(speedSpec(run)).toBeNull();
    expect(probeSpec(run)).toBeNull();
    expect(llamaBenchSpec(run)).toEqual({ prompt_tokens: [512], gen_tokens: [128], depths: [0, 4096], repetitions: 5 });
    expect(llamaBenchSpec(summary(1))).toBeNull();
  });
  it('show their progress as tests', () => {
    expect(progressText({ kind: 'llama_bench', runs_done: 0, runs_total: 4 })).toBe('0 / 4 tests');
    expect(progressText({ kind: 'llama_bench', runs_done: 1, runs_total: 1 })).toBe('1 / 1 test');
  });
  it('say their settings in words, llama-bench’s defaults where left out', () => {
    expect(runSpecText(llamaSummary(3))).toBe('pp 512, tg 128 at depths 0 and 4096, 5 repetitions each, inside the engine (no HTTP)');
    expect(llamaBenchText({})).toBe('pp 512, tg 128 at depth 0, 5 repetitions each, inside the engine (no HTTP)');
    expect(llamaBenchText({ prompt_tokens: [16, 32], gen_tokens: [8], depths: [0, 16, 64], repetitions: 1 })).toBe(
      'pp 16, 32, tg 8 at depths 0, 16 and 64, 1 repetition each, inside the engine (no HTTP)',
    );
  });
});

describe('estimated prompt lengths', () => {
  it('are said only once the engine’s tokenizer was asked', () => {
    const starting = summary(1, { status: 'running', exact_prompts: false, prompts_known: false, finished_at_ms: null, steps: [] });
    expect(promptsEstimated(starting)).toBe(false);
    expect(promptsEstimated({ ...starting, prompts_known: true })).toBe(true);
    expect(promptsEstimated({ ...starting, prompts_known: true, exact_prompts: true })).toBe(false);
  });
  it('are said for a run from a daemon that does not tell when it knew', () => {
    expect(promptsEstimated(summary(2, { exact_prompts: false }))).toBe(true);
  });
  it('are never said of a quality probe or llama-bench, which send no shaped prompts', () => {
    expect(promptsEstimated(summary(3, { kind: 'quality', exact_prompts: false, prompts_known: true }))).toBe(false);
    expect(promptsEstimated(summary(4, { kind: 'llama_bench', exact_prompts: false, prompts_known: true }))).toBe(false);
  });
});
