// Model facts for the library.

import { describe, expect, it } from 'vitest';
import { response } from '../../test/plans';
import type { ModelSummary } from '../api/types';
import { baseName, formatAttention, formatBpw, formatContext, formatExperts, formatParams, formatPerLayer, quantSlices, typeBits, typeColor } from './model';

const glm = (): ModelSummary => ({
  ...response([], {} as never, 78).model,
  mla: { key_length_mla: 256, value_length_mla: 256, kv_lora_rank: 512, q_lora_rank: 2048, active: true },
  experts: { count: 256, used: 8, shared: 1, leading_dense_blocks: 3, feed_forward_length: 2048 },
});

describe('model facts', () => {
  it('parameters and context', () => {
    expect(formatParams(743_911_218_432)).toBe('743.9 B');
    expect(formatParams(1_020_000_000_000)).toBe('1.02 T');
    expect(formatParams(135_000_000)).toBe('135 M');
    expect(formatParams(0)).toBe('—');
    expect(formatContext(202_752)).toBe('202\u202f752 (198 K)');
    expect(formatContext(4096)).toBe('4\u202f096 (4 K)');
    expect(formatContext(null)).toBe('—');
  });

  it('attention: heads, KV heads, MLA, sliding window', () => {
    expect(formatAttention(glm())).toBe('64 heads / 1 KV · MLA (KV rank 512, Q rank 2048)');
    const gemma: ModelSummary = { ...glm(), mla: null, head_count: 16, head_count_kv: [8, 8, 8, 8, 8, 4], sliding_window: 1024, sliding_window_pattern: { period: 6 } };
    expect(formatAttention(gemma)).toBe('16 heads / 4–8 (per layer) KV · sliding window 1\u202f024 (every 6th layer full)');
    expect(formatPerLayer([8, 8])).toBe('8');
  });

  it('experts', () => {
    expect(formatExperts(glm())).toBe('256 total · 8 active · 1 shared · first 3 layers dense');
    expect(formatExperts({ ...glm(), experts: null })).toBeNull();
  });

  it('quantization histogram by bytes, coloured by bits', () => {
    const s = quantSlices([
      { ggml_type: 'IQ2_XXS', tensors: 150, elements: 1, bytes: 300 },
      { ggml_type: 'Q4_K', tensors: 547, elements: 1, bytes: 100 },
    ]);
    expect(s.map((x) => [x.type, x.pct])).toEqual([['IQ2_XXS', 75], ['Q4_K', 25]]);
    expect(typeBits('IQ2_XXS')).toBeLessThan(typeBits('Q4_K'));
    expect(typeBits('Q8_0')).toBeGreaterThan(typeBits('Q6_K'));
    expect(typeColor('F32')).toBe(typeColor('BF16'));
    expect(typeColor('IQ2_XXS')).not.toBe(typeColor('Q8_0'));
    expect(quantSlices([])).toEqual([]);
    expect(formatBpw(2.223674668402934)).toBe('2.22 bpw');
  });

  it('base names', () => {
    expect(baseName('/m/glm/GLM-5.2-IQ2-00001-of-00006.gguf')).toBe('GLM-5.2-IQ2-00001-of-00006.gguf');
    expect(baseName('/m/Qwen3-8B/')).toBe('Qwen3-8B');
  });
});
