// A llama-bench run's shaping: test kinds and sizes, figures from the repetitions, tok/s against
// depth per kind, boxes of the repetitions, what it ran on, its context, the list's headline, and
// picked runs compared test by test.

import { describe, expect, it } from 'vitest';
import { llamaDetail, llamaTest } from '../../test/llamaBench';
import {
  buildLine,
  compareTests,
  kindsOf,
  llamaBenchContext,
  meanStdevText,
  settingsLine,
  sizeLabel,
  specHeadline,
  testBoxes,
  testFigures,
  testKind,
  testsAgainstDepth,
} from './llamaBench';

describe('test kinds', () => {
  it('tells pp, tg and pp+tg tests apart, and names their size', () => {
    expect(testKind({ n_prompt: 512, n_gen: 0 })).toBe('pp');
    expect(testKind({ n_prompt: 0, n_gen: 128 })).toBe('tg');
    expect(testKind({ n_prompt: 512, n_gen: 128 })).toBe('pg');
    expect(sizeLabel({ n_prompt: 512, n_gen: 0 })).toBe('pp512');
    expect(sizeLabel({ n_prompt: 0, n_gen: 128 })).toBe('tg128');
    expect(sizeLabel({ n_prompt: 512, n_gen: 128 })).toBe('pp512+tg128');
    expect(kindsOf(llamaDetail(1).tests!)).toEqual(['pp', 'tg']);
    expect(kindsOf([])).toEqual([]);
  });
});

describe('testFigures', () => {
  it('takes the median and spread from the statistics, the mean and stdev from llama-bench', () => {
    const t = llamaTest('pp', 512, 0, [1000, 1010, 990, 1005, 995]);
    const f = testFigures(t);
    expect(f.reps).toBe(5);
    expect(f.median).toBe(1000);
    expect(f.p10).toBeCloseTo(992);
    expect(f.p90).toBeCloseTo(1008);
    expect(f.mean).toBe(1000);
    expect(f.cv).toBeCloseTo(t.stats!.cv);
    expect(meanStdevText(t)).toBe('1000 ± 7.9');
  });

  it('falls back on llama-bench’s mean when the daemon has no statistics', () => {
    const t = llamaTest('tg', 128, 0, [], { stats: null, avg_ts: 50, stddev_ts: 1 });
    expect(testFigures(t)).toEqual({ reps: 0, median: 50, p10: null, p90: null, mean: 50, stdev: 1, cv: 0.02 });
    expect(testFigures({ ...t, avg_ts: 0 }).cv).toBeNull();
  });
});

describe('testsAgainstDepth', () => {
  it('draws each size’s median against the depths, one kind at a time', () => {
    const tests = [...llamaDetail(1).tests!, llamaTest('pp', 2048, 4096, [600, 600])];
    expect(testsAgainstDepth(tests, 'pp')).toEqual({
      x: [0, 4096],
      series: [
        { label: 'pp512', color: '#4ea1ff', values: [1000, 800] },
        { label: 'pp2048', color: '#3fb950', values: [null, 600] },
      ],
    });
    expect(testsAgainstDepth(tests, 'tg')?.series.map((s) => s.values)).toEqual([[50, 40]]);
  });

  it('has no line to draw with one depth or none of the kind', () => {
    const tests = [llamaTest('pp', 512, 0, [1]), llamaTest('tg', 128, 0, [1])];
    expect(testsAgainstDepth(tests, 'pp')).toBeNull();
    expect(testsAgainstDepth(tests, 'pg')).toBeNull();
  });
});

describe('testBoxes', () => {
  it('makes a box of each test’s repetitions, no cold run', () => {
    const boxes = testBoxes(llamaDetail(1).tests!, 'tg');
    expect(boxes.map((b) => b.label)).toEqual(['tg128 @ d0', 'tg128 @ d4096']);
    expect(boxes[0]).toMatchObject({ index: 0, cold: null, box: { n: 5, min: 49, median: 50, max: 51 } });
    expect(testBoxes([llamaTest('pp', 16, 0, [])], 'pp')[0]!.box).toBeNull();
  });
});

describe('what it ran on', () => {
  it('reads the build, backends, CPU and GPU from the first test', () => {
    const tests = llamaDetail(1).tests!;
    expect(buildLine(tests)).toBe('build 0c1e570 (6123) · CPU · AMD Ryzen 9 7950X 16-Core Processor');
    expect(buildLine([llamaTest('pp', 1, 0, [1], { build_commit: null, backends: 'CUDA', cpu_info: '', gpu_info: 'NVIDIA GeForce RTX 5060 Ti' })])).toBe('CUDA · NVIDIA GeForce RTX 5060 Ti');
    expect(buildLine([llamaTest('pp', 1, 0, [1], { build_number: 0 })])).toBe('build 0c1e570 · CPU · AMD Ryzen 9 7950X 16-Core Processor');
    expect(buildLine([])).toBeNull();
  });

  it('says the model and the settings llama-bench used', () => {
    expect(settingsLine(llamaDetail(1).tests!)).toBe('llama ?B F32, 1 thread, 99 GPU layers, batch 2048 / ubatch 512, KV f16/f16, flash attention off');
    const bare = llamaTest('pp', 1, 0, [1], {
      model_type: null,
      n_threads: null,
      n_gpu_layers: null,
      n_batch: null,
      n_ubatch: null,
      type_k: null,
      type_v: null,
      flash_attn: null,
      tensor_split: '3.00/1.00',
      tensor_buft_overrides: 'exps=CPU',
    });
    expect(settingsLine([bare])).toBe('tensor split 3.00/1.00, overrides exps=CPU');
    expect(settingsLine([{ ...bare, tensor_split: null, tensor_buft_overrides: 'none' }])).toBeNull();
    expect(settingsLine([{ ...bare, tensor_split: '0.00', tensor_buft_overrides: null }])).toBeNull();
    expect(settingsLine([{ ...bare, tensor_split: '0.00/0.00', tensor_buft_overrides: null }])).toBeNull();
  });
});

describe('llamaBenchContext', () => {
  it('reads the command line and the dropped flags', () => {
    expect(llamaBenchContext(llamaDetail(1).context)).toEqual({
      commandLine: 'llama-bench -m /models/tiny.gguf -t 1 -p 512 -n 128 -d 0,4096 -r 5 -o json',
      dropped: ['-c 2048', '-np 2'],
    });
  });

  it('has nothing for a run without them', () => {
    expect(llamaBenchContext({})).toEqual({ commandLine: null, dropped: [] });
    expect(llamaBenchContext({ llama_bench: { command_line: ' ', dropped: [3, '-c 1'] } })).toEqual({ commandLine: null, dropped: ['-c 1'] });
  });
});

describe('specHeadline', () => {
  it('names the sizes and depths, llama-bench’s defaults where left out', () => {
    expect(specHeadline({ prompt_tokens: [512, 2048], gen_tokens: [128], depths: [0, 4096], repetitions: 5 })).toBe('pp512 · pp2048 · tg128 @ d0, 4096');
    expect(specHeadline({})).toBe('pp512 · tg128 @ d0');
  });
});

describe('compareTests', () => {
  it('sets the same tests side by side with the ratio to the base', () => {
    const a = { id: 1, tests: [llamaTest('pp', 512, 0, [1000]), llamaTest('tg', 128, 0, [50]), llamaTest('pp', 512, 4096, [800])] };
    const b = { id: 2, tests: [llamaTest('tg', 128, 0, [60]), llamaTest('pp', 512, 0, [1500])] };
    const { rows, unmatched } = compareTests([a, b]);
    expect(rows.map((r) => r.test)).toEqual(['pp512 @ d0', 'tg128 @ d0']);
    expect(unmatched).toBe(1);
    expect(rows[0]!.cells).toEqual([
      { median: 1000, cv: 0, ratio: null },
      { median: 1500, cv: 0, ratio: 1.5 },
    ]);
    expect(rows[1]!.cells[1]!.ratio).toBeCloseTo(1.2);
  });

  it('keeps a test two later runs share, without a ratio when the base lacks it', () => {
    const a = { id: 1, tests: [llamaTest('pp', 512, 0, [1000])] };
    const b = { id: 2, tests: [llamaTest('tg', 64, 0, [30])] };
    const c = { id: 3, tests: [llamaTest('tg', 64, 0, [60])] };
    const { rows } = compareTests([a, b, c]);
    expect(rows).toEqual([{ test: 'tg64 @ d0', cells: [null, { median: 30, cv: 0, ratio: null }, { median: 60, cv: 0, ratio: null }] }]);
    expect(compareTests([])).toEqual({ rows: [], unmatched: 0 });
  });
});
