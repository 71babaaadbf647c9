// The files offered to record a reference with: precise ones first, unusable ones left out.

import { describe, expect, it } from 'vitest';
import type { ModelEntry } from '../api/types';
import { precisionRank, referenceFileLabel, referenceFiles } from './models';

function entry(name: string, label: string | null, bpw: number | null, extra: Partial<ModelEntry> = {}): ModelEntry {
  return {
    path: `/m/${name}.gguf`,
    name,
    format: 'gguf',
    folder: '/m',
    files: [],
    size_bytes: 1,
    gguf: { file_type: label == null ? null : { id: 0, label }, bits_per_weight: bpw } as ModelEntry['gguf'],
    safetensors: null,
    problem: null,
    ollama: null,
    ...extra,
  };
}

describe('reference files', () => {
  it('rank full and half precision first, then Q8_0, then the rest', () => {
    expect(precisionRank('BF16')).toBe(0);
    expect(precisionRank('f16')).toBe(0);
    expect(precisionRank('Q8_0')).toBe(1);
    expect(precisionRank('Q4_K_M')).toBe(2);
    expect(precisionRank(null)).toBe(2);
  });

  it('list the library most precise first and leave out what cannot be used', () => {
    const files = referenceFiles([
      entry('small-q4', 'Q4_K_M', 4.8),
      entry('small-q6', 'Q6_K', 6.6),
      entry('small-q8', 'Q8_0', 8.5),
      entry('small-bf16', 'BF16', 16),
      entry('broken', 'F16', 16, { problem: 'truncated: download it again' }),
      entry('folder', null, null, { format: 'safetensors', gguf: null }),
      entry('unknown', null, null),
    ]);
    expect(files.map((f) => f.name)).toEqual(['small-bf16', 'small-q8', 'small-q6', 'small-q4', 'unknown']);
    expect(files.map((f) => f.precise)).toEqual([true, true, false, false, false]);
    expect(referenceFileLabel(files[0]!)).toBe('small-bf16 · BF16');
    expect(referenceFileLabel(files[4]!)).toBe('unknown');
  });
});
