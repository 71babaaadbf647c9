// A hub repository's groups on the model page.

import { describe, expect, it } from 'vitest';
import type { FileGroup } from '../api/types';
import { fileCount, missingText, pageGroups, safetensorsQuant } from './groups';

function group(kind: string, label: string, files = 1): FileGroup {
  return {
    kind,
    label,
    files: Array.from({ length: files }, (_, i) => ({ path: `${label}-${i}`, size_bytes: 1, git_oid: 'a'.repeat(40), lfs_sha256: null })),
    total_bytes: files,
    missing: null,
  };
}

describe('pageGroups', () => {
  it('splits quantizations, projectors, safetensors and the rest, keeping the order', () => {
    const g = pageGroups([
      group('gguf', 'Q4_K_M'),
      group('gguf', 'UD-IQ2_M', 6),
      group('projector', 'mmproj-F16'),
      group('safetensors', 'safetensors', 4),
      group('other', 'README.md'),
      group('brand_new', 'x.bin'),
    ]);
    expect(g.quants.map((q) => q.label)).toEqual(['Q4_K_M', 'UD-IQ2_M']);
    expect(g.projectors.map((q) => q.label)).toEqual(['mmproj-F16']);
    expect(g.safetensors?.label).toBe('safetensors');
    expect(g.other.map((q) => q.label)).toEqual(['README.md', 'x.bin']);
    expect(safetensorsQuant(g)).toBe('safetensors');
  });
  it('downloads everything of a safetensors-only repository', () => {
    expect(safetensorsQuant(pageGroups([group('safetensors', 'safetensors'), group('other', 'config.json')]))).toBeUndefined();
  });
});

describe('file counts and incomplete uploads', () => {
  it('counts files', () => {
    expect(fileCount(1)).toBe('1 file');
    expect(fileCount(6)).toBe('6 files');
  });
  it('says which parts are missing', () => {
    expect(missingText({ prefix: 'GLM/GLM-UD-IQ2_M', count: 6, ranges: [[3, 3]] })).toBe(
      'incomplete upload: part 3 of 6 is missing, so it cannot be loaded',
    );
    expect(missingText({ prefix: 'x', count: 6, ranges: [[2, 2], [5, 6]] })).toBe(
      'incomplete upload: parts 2 and 5–6 of 6 are missing, so it cannot be loaded',
    );
    expect(missingText({ prefix: 'x', count: 99, ranges: [[2, 2], [4, 4], [6, 6], [8, 8], [10, 90]] })).toBe(
      'incomplete upload: parts 2, 4, 6 and 2 more ranges of 99 are missing, so it cannot be loaded',
    );
  });
});
