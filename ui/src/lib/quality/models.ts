// The model files a reference can be recorded with, best reference first: full or half precision
// (F32, BF16, F16), then Q8_0, then the rest by bits per weight. A reference should be the most
// precise file of the model the user has; a lower one is still allowed (it measures distance from
// that file instead).

import type { ModelEntry } from '../api/types';

/** 0: full or half precision, 1: Q8_0, 2: anything else (or unknown). */
export function precisionRank(label: string | null | undefined): number {
  const l = (label ?? '').toUpperCase();
  if (l === 'F32' || l === 'BF16' || l === 'F16') return 0;
  if (l === 'Q8_0') return 1;
  return 2;
}

export interface ReferenceFile {
  path: string;
  name: string;
  /** The file type ("BF16", "Q4_K_M"), or null when the header does not say. */
  type: string | null;
  bitsPerWeight: number | null;
  /** A good reference: BF16, F16, F32 or Q8_0. */
  precise: boolean;
}

/** The library's usable GGUF files, most precise first (then by name). */
export function referenceFiles(entries: readonly ModelEntry[]): ReferenceFile[] {
  return entries
    .filter((e) => e.format === 'gguf' && e.problem == null)
    .map((e) => {
      const type = e.gguf?.file_type?.label ?? null;
      return { path: e.path, name: e.name, type, bitsPerWeight: e.gguf?.bits_per_weight ?? null, precise: precisionRank(type) < 2 };
    })
    .sort((a, b) => precisionRank(a.type) - precisionRank(b.type) || (b.bitsPerWeight ?? 0) - (a.bitsPerWeight ?? 0) || a.name.localeCompare(b.name));
}

/** "gemma-3-270m · BF16". */
export function referenceFileLabel(f: ReferenceFile): string {
  return f.type ? `${f.name} · ${f.type}` : f.name;
}
