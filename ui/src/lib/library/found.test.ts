// The found-folders list: each folder's line, the order folders are offered in, and the library
// entries of Ollama tags (unique keys though they share a blob, the "Ollama" source).

import { describe, expect, it } from 'vitest';
import type { KnownFolder, ModelEntry } from '../api/types';
import { folderLine, modelCount, offerOrder } from './found';
import { modelKey, modelSource } from './entries';

function folder(tool: KnownFolder['tool'], display_path: string, models: number, size_bytes: number, added = false): KnownFolder {
  return { tool, path: display_path.replace('~', '/home/ann'), display_path, models, size_bytes, added, problems: [] };
}

function entry(path: string, ollama: ModelEntry['ollama'] = null): ModelEntry {
  return { path, name: 'm', format: 'gguf', folder: '/f', files: [], size_bytes: 1, gguf: null, safetensors: null, problem: null, ollama };
}

describe('found folders', () => {
  it('says the tool, the path, the models and their size', () => {
    expect(folderLine(folder('Ollama', '~/.ollama/models', 3, 12.4 * 1024 ** 3))).toBe('Ollama · ~/.ollama/models · 3 models · 12.4 GiB');
    expect(folderLine(folder('Jan', '~/jan/models', 1, 2048))).toBe('Jan · ~/jan/models · 1 model · 2.0 KiB');
    expect(folderLine(folder('LM Studio', '~/.lmstudio/models', 0, 0))).toBe('LM Studio · ~/.lmstudio/models · no models');
    expect(modelCount(2)).toBe('2 models');
  });

  it('offers folders with models first and the added ones last, keeping the tools order', () => {
    const hf = folder('Hugging Face', '~/.cache/huggingface/hub', 4, 10, true);
    const lm = folder('LM Studio', '~/.lmstudio/models', 0, 0);
    const llama = folder('llama.cpp', '~/.cache/llama.cpp', 1, 10);
    const ollama = folder('Ollama', '~/.ollama/models', 2, 10);
    expect(offerOrder([hf, lm, llama, ollama]).map((f) => f.tool)).toEqual(['llama.cpp', 'Ollama', 'LM Studio', 'Hugging Face']);
  });
});

describe('library entries of Ollama tags', () => {
  it('keys each tag by its manifest though two tags share one blob', () => {
    const blob = '/home/ann/.ollama/models/blobs/sha256-ab';
    const latest = entry(blob, { tag: 'qwen3:latest', manifest: '/m/qwen3/latest', projector: null });
    const eight = entry(blob, { tag: 'qwen3:8b', manifest: '/m/qwen3/8b', projector: null });
    expect(new Set([latest, eight, entry('/models/a.gguf')].map(modelKey)).size).toBe(3);
    expect(modelSource(eight)).toBe('Ollama');
    expect(modelSource(entry('/models/a.gguf'))).toBeNull();
  });
});
