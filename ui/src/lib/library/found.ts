// "I already have models": the folders other tools keep models in on this machine, as the
// found-folders list shows them (tool · path · models · size), the ones worth adding first.

import type { KnownFolder } from '../api/types';
import { formatBytes } from '../format/units';

/** "no models", "1 model", "3 models". */
export function modelCount(n: number): string {
  if (n === 0) return 'no models';
  return n === 1 ? '1 model' : `${n} models`;
}

/** "Ollama · ~/.ollama/models · 3 models · 12.4 GiB" (no size when there are no models). */
export function folderLine(folder: KnownFolder): string {
  const parts = [folder.tool, folder.display_path, modelCount(folder.models)];
  if (folder.models > 0) parts.push(formatBytes(folder.size_bytes));
  return parts.join(' · ');
}

/** Folders not in the library yet with models in them first, then empty ones, then those already
 *  added; the daemon's order (the tools' order) within each. */
export function offerOrder(folders: KnownFolder[]): KnownFolder[] {
  const rank = (f: KnownFolder) => (f.added ? 2 : f.models > 0 ? 0 : 1);
  return folders
    .map((folder, index) => ({ folder, index }))
    .sort((a, b) => rank(a.folder) - rank(b.folder) || a.index - b.index)
    .map((x) => x.folder);
}

/** What the list says when nothing was found. */
export const NOTHING_FOUND =
  'No other tool keeps models on this machine where Rigdeck looked (the Hugging Face cache, LM Studio, llama.cpp, Ollama, Jan): add a folder by its path.';
