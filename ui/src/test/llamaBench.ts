// llama-bench answers for the shaping tests: tests as llama-bench reports them (a pp or tg size
// at a depth, tok/s per repetition, what it ran on) and llama-bench runs as listed and in full.

import type { LlamaBenchTest, RunDetail, RunSummary } from '../lib/bench/types';
import { detail, stats, summary } from './bench';

/** A test of these tok/s per repetition: `pp` or `tg` tokens at `depth`. */
export function llamaTest(kind: 'pp' | 'tg', size: number, depth: number, samples: number[], extra: Partial<LlamaBenchTest> = {}): LlamaBenchTest {
  const s = stats(samples);
  return {
    test: `${kind}${size} @ d${depth}`,
    n_prompt: kind === 'pp' ? size : 0,
    n_gen: kind === 'tg' ? size : 0,
    n_depth: depth,
    avg_ts: s.mean,
    stddev_ts: s.stdev,
    samples_ts: samples,
    stats: s,
    build_commit: '0c1e570',
    build_number: 6123,
    backends: 'CPU',
    gpu_info: null,
    cpu_info: 'AMD Ryzen 9 7950X 16-Core Processor',
    model_filename: '/models/tiny.gguf',
    model_type: 'llama ?B F32',
    n_threads: 1,
    n_gpu_layers: 99,
    n_batch: 2048,
    n_ubatch: 512,
    type_k: 'f16',
    type_v: 'f16',
    flash_attn: 'off',
    tensor_split: null,
    tensor_buft_overrides: 'none',
    ...extra,
  };
}

/** A llama-bench run as listed: pp 512 and tg 128 at depths 0 and 4096, 5 repetitions. */
export function llamaSummary(id: number, extra: Partial<RunSummary> = {}): RunSummary {
  return summary(id, {
    kind: 'llama_bench',
    target: { kind: 'profile', name: 'qwen' },
    spec: { prompt_tokens: [512], gen_tokens: [128], depths: [0, 4096], repetitions: 5 },
    exact_prompts: false,
    steps: [],
    runs_done: 4,
    runs_total: 4,
    quality: null,
    ...extra,
  });
}

/** A llama-bench run in full, with these tests (by default its four). */
export function llamaDetail(id: number, tests: LlamaBenchTest[] = defaultTests(), extra: Partial<RunDetail> = {}): RunDetail {
  return {
    ...detail(id),
    ...llamaSummary(id),
    results: [],
    tests,
    context: { llama_bench: { command_line: 'llama-bench -m /models/tiny.gguf -t 1 -p 512 -n 128 -d 0,4096 -r 5 -o json', dropped: ['-c 2048', '-np 2'] } },
    ...extra,
  };
}

function defaultTests(): LlamaBenchTest[] {
  return [
    llamaTest('pp', 512, 0, [1000, 1010, 990, 1005, 995]),
    llamaTest('tg', 128, 0, [50, 51, 49, 50, 50]),
    llamaTest('pp', 512, 4096, [800, 810, 790, 805, 795]),
    llamaTest('tg', 128, 4096, [40, 41, 39, 40, 40]),
  ];
}
