// A hub repository's files as the model page lists them: GGUF quantizations in the table,
// projectors (vision) and everything else apart, and the safetensors weights as one download.

import type { FileGroup, MissingParts } from '../api/types';

export interface PageGroups {
  quants: FileGroup[];
  projectors: FileGroup[];
  safetensors: FileGroup | null;
  other: FileGroup[];
}

/** Sorts the daemon's groups by kind, keeping its order (quantizations ascending by size). */
export function pageGroups(groups: FileGroup[]): PageGroups {
  return {
    quants: groups.filter((g) => g.kind === 'gguf'),
    projectors: groups.filter((g) => g.kind === 'projector'),
    safetensors: groups.find((g) => g.kind === 'safetensors') ?? null,
    // A kind a newer daemon adds is listed with the other files rather than lost.
    other: groups.filter((g) => !['gguf', 'projector', 'safetensors'].includes(g.kind)),
  };
}

export function fileCount(n: number): string {
  return n === 1 ? '1 file' : `${n} files`;
}

/** "parts 2, 5 and 6 of 6 are missing" (ranges as "3–40"): why an incomplete upload is not offered. */
export function missingText(m: MissingParts): string {
  const parts = m.ranges.map(([a, b]) => (a === b ? String(a) : `${a}–${b}`));
  const count = m.ranges.reduce((n, [a, b]) => n + (b - a + 1), 0);
  const shown = parts.length > 4 ? [...parts.slice(0, 3), `${parts.length - 3} more ranges`] : parts;
  const list = shown.length > 1 ? `${shown.slice(0, -1).join(', ')} and ${shown[shown.length - 1]}` : (shown[0] ?? '');
  return `incomplete upload: part${count === 1 ? '' : 's'} ${list} of ${m.count} ${count === 1 ? 'is' : 'are'} missing, so it cannot be loaded`;
}

/** What "Download all" fetches for a repository without GGUF: no quant (the daemon takes every
 *  file); beside GGUF quantizations, the safetensors group by its label. */
export function safetensorsQuant(groups: PageGroups): string | undefined {
  return groups.quants.length === 0 ? undefined : (groups.safetensors?.label ?? undefined);
}
