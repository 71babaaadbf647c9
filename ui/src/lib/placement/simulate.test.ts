// llama.cpp's layer assignment (ported cases from crates/core/src/placement/layers.rs) and -ot
// first-match semantics.

import { describe, expect, it } from 'vitest';
import { options } from '../../test/plans';
import { assignLayers, compileOverrides, compilePattern, expertsDevice, firstMatch } from './simulate';

const count = (xs: string[], k: string) => xs.filter((x) => x === k).length;

describe('assignLayers', () => {
  it('splits 32 layers + output evenly over two equal cards', () => {
    const d = assignLayers(32, [24 * 2 ** 30, 24 * 2 ** 30], options());
    expect(count(d.layers, 'gpu-0')).toBe(17);
    expect(count(d.layers, 'gpu-1')).toBe(15);
    expect(d.output).toBe('gpu-1');
  });

  it('keeps the first layers on the CPU with -ngl, the output counting as one', () => {
    const d = assignLayers(10, [8 * 2 ** 30], options({ n_gpu_layers: 5 }));
    expect(d.layers.slice(0, 6)).toEqual(Array(6).fill('cpu'));
    expect(d.layers.slice(6)).toEqual(Array(4).fill('gpu-0'));
    expect(d.output).toBe('gpu-0');
    const none = assignLayers(10, [8 * 2 ** 30], options({ n_gpu_layers: 0 }));
    expect(none.layers.every((x) => x === 'cpu')).toBe(true);
    expect(none.output).toBe('cpu');
  });

  it('follows -ts proportions (the seed’s 4× PRO 6000 split)', () => {
    const d = assignLayers(78, [0, 0, 0, 0], options({ tensor_split: [1, 0.75, 0.9, 1] }));
    expect([0, 1, 2, 3].map((g) => count(d.layers, `gpu-${g}`))).toEqual([22, 16, 20, 20]);
  });

  it('uses the main GPU only with -sm none, and the CPU without GPUs', () => {
    expect(assignLayers(4, [1, 1], options({ split_mode: 'none', main_gpu: 1 })).layers).toEqual(Array(4).fill('gpu-1'));
    expect(assignLayers(4, [], options()).layers).toEqual(Array(4).fill('cpu'));
  });
});

describe('overrides', () => {
  it('take the first match, unanchored, like the daemon', () => {
    const c = compileOverrides([
      { pattern: String.raw`blk\.1\.ffn_.*_exps`, device: { kind: 'gpu', index: 2 } },
      { pattern: 'exps', device: { kind: 'cpu' } },
    ]);
    expect(firstMatch(c, 'blk.1.ffn_up_exps.weight')).toBe(0);
    expect(firstMatch(c, 'blk.11.ffn_up_exps.weight')).toBe(1);
    expect(firstMatch(c, 'blk.1.attn_q.weight')).toBe(-1);
    expect(expertsDevice(c, 1, 'gpu-0')).toBe('gpu-2');
    expect(expertsDevice(c, 11, 'gpu-0')).toBe('cpu');
  });

  it('read a leading (?i) and skip a pattern JavaScript cannot compile', () => {
    expect(compilePattern('(?i)EXPS')?.test('blk.3.ffn_up_exps.weight')).toBe(true);
    const c = compileOverrides([{ pattern: '(?P<x>exps', device: { kind: 'cpu' } }]);
    expect(c[0]!.regex).toBeNull();
    expect(firstMatch(c, 'blk.1.ffn_up_exps.weight')).toBe(-1);
  });
});
