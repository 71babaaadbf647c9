import { describe, expect, it } from 'vitest';
import type { FileGroup, ModelEntry, QuantFit, RecommendedModel } from '../api/types';
import { modelRunBlock, quantRunBlock, recommendedCard } from './runnable';

function recommended(over: Partial<RecommendedModel> = {}): RecommendedModel {
  return {
    repo: 'unsloth/Qwen3-4B-GGUF',
    quant: 'Q4_K_M',
    kind: 'dense',
    params: '4B',
    fits: true,
    verdict: { kind: 'cpu_only' },
    summary: 'fits in CPU RAM (the rig has no GPU)',
    total_bytes: 2_500_000_000,
    tokens_per_s: 14.2,
    why: 'small',
    choice: "Q4_K_M, the catalog's suggestion, fits",
    ...over,
  };
}

describe('recommendedCard', () => {
  it('runs the chosen quantization of a model that fits', () => {
    const card = recommendedCard(recommended());
    expect(card.blocked).toBeNull();
    expect(card.source).toEqual({ kind: 'hub', repo: 'unsloth/Qwen3-4B-GGUF', quant: 'Q4_K_M' });
    expect(card.verdict).toBe('on the CPU');
    expect(card.tone).toBe('ok');
    expect(card.speed).toBe('≤ 14.2 tok/s');
    expect(card.size).toMatch(/GB|GiB/);
  });

  it('marks a model that does not fit and says why Run is off', () => {
    const card = recommendedCard(
      recommended({ fits: false, verdict: { kind: 'does_not_fit', short_bytes: 3 * 2 ** 30 }, summary: 'does not fit: 3.0 GiB short' }),
    );
    expect(card.tone).toBe('bad');
    expect(card.verdict).toBe('does not fit: 3.0 GiB short');
    expect(card.blocked).toContain('does not fit: 3.0 GiB short');
  });
});

const group = (over: Partial<FileGroup> = {}): FileGroup =>
  ({ label: 'Q4_K_M', kind: 'gguf', files: [], total_bytes: 1, missing: null, ...over }) as FileGroup;
const fit = (over: Partial<QuantFit> = {}): QuantFit =>
  ({ label: 'Q4_K_M', total_bytes: 1, verdict: { kind: 'on_gpus', gpus: 1 }, summary: 'fits on the GPU', devices: [], tokens_per_s: null, command_line: null, error: null, recommended: false, ...over }) as QuantFit;

describe('quantRunBlock', () => {
  it('lets a fitting or not yet planned quantization run', () => {
    expect(quantRunBlock(group(), fit())).toBeNull();
    expect(quantRunBlock(group(), null)).toBeNull();
  });
  it('refuses one that does not fit, one unknown, and an incomplete upload', () => {
    expect(quantRunBlock(group(), fit({ verdict: { kind: 'does_not_fit', short_bytes: 1 }, summary: 'does not fit: 0.0 GiB short' }))).toContain(
      'choose a smaller quantization',
    );
    expect(quantRunBlock(group(), fit({ verdict: null, error: 'bad magic' }))).toContain('bad magic');
    expect(quantRunBlock(group({ missing: { expected: 3, present: [1] } as unknown as FileGroup['missing'] }), fit())).toContain('incomplete');
  });
});

describe('modelRunBlock', () => {
  const model = (over: Partial<ModelEntry> = {}): ModelEntry =>
    ({ path: '/m/a.gguf', name: 'a', format: 'gguf', folder: '/m', files: [], size_bytes: 1, gguf: null, safetensors: null, problem: null, ollama: null, ...over }) as ModelEntry;
  it('runs a GGUF without a problem', () => {
    expect(modelRunBlock(model())).toBeNull();
  });
  it('names the problem, or the way for a safetensors folder', () => {
    expect(modelRunBlock(model({ problem: 'shard 2 of 3 is missing' }))).toBe('shard 2 of 3 is missing');
    expect(modelRunBlock(model({ format: 'safetensors' }))).toContain('vLLM');
  });
});
