// Library entries as lists show them: a key unique per entry (Ollama tags of one blob share its
// path) and where an entry comes from when that is not a plain file.

import type { ModelEntry } from '../api/types';

/** Unique per entry: an Ollama tag by its manifest (two tags may name one blob), else the path. */
export function modelKey(model: ModelEntry): string {
  return model.ollama?.manifest ?? model.path;
}

/** "Ollama" for a tag read from Ollama's store, null for a model file or folder. */
export function modelSource(model: ModelEntry): string | null {
  return model.ollama ? 'Ollama' : null;
}
