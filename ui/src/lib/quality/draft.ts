// The Quality section's forms as the user fills them, and what they send: a reference to record
// (a model file or a profile; the built-in corpus, a text file or chosen conversations; tokens per
// window and how many windows) and the KLD runs to start (profiles against a ready reference).
// A form that cannot be sent says which field and how to fix it.

import type { CorpusSpec, ModelRef, NewKldRun, NewReference, Reference } from './types';

/** Long enough for KV cache effects to show: a short window hides them. */
export const DEFAULT_CONTEXT = 8192;

export interface RecordDraft {
  modelKind: 'file' | 'profile';
  /** The model file's path (modelKind 'file'). */
  path: string;
  /** The profile's name (modelKind 'profile'). */
  profile: string;
  corpusKind: CorpusSpec['kind'];
  /** A text file's path (corpusKind 'file'). */
  filePath: string;
  /** Chosen conversations (corpusKind 'conversations'). */
  conversations: number[];
  /** Tokens per window, as typed. */
  context: string;
  /** Windows to score, as typed; blank: every window the corpus holds. */
  chunks: string;
}

export function defaultRecordDraft(): RecordDraft {
  return { modelKind: 'file', path: '', profile: '', corpusKind: 'builtin', filePath: '', conversations: [], context: String(DEFAULT_CONTEXT), chunks: '' };
}

export type DraftResult = { ok: true; body: NewReference } | { ok: false; problem: string };

function model(d: RecordDraft): ModelRef | string {
  if (d.modelKind === 'profile') {
    return d.profile ? { kind: 'profile', name: d.profile } : 'Pick a launch profile to record the reference with.';
  }
  return d.path ? { kind: 'file', path: d.path } : 'Pick a model file to record the reference with (its most precise file: BF16, F16 or Q8_0).';
}

function corpus(d: RecordDraft): CorpusSpec | string {
  switch (d.corpusKind) {
    case 'builtin':
      return { kind: 'builtin' };
    case 'file': {
      const path = d.filePath.trim();
      if (!path) return 'Type the path of a text file for the corpus, or pick the built-in corpus.';
      if (!path.startsWith('/') && !path.startsWith('~/')) return `The corpus file "${path}" is not an absolute path: write it from / (or ~/).`;
      return { kind: 'file', path };
    }
    case 'conversations':
      return d.conversations.length > 0 ? { kind: 'conversations', ids: [...d.conversations].sort((a, b) => a - b) } : 'Tick at least one conversation for the corpus.';
  }
}

/** A whole number from `min` up, as typed; null when it is not one. */
function wholeNumber(text: string, min: number): number | null {
  const t = text.trim();
  if (!/^\d+$/.test(t)) return null;
  const n = Number(t);
  return Number.isSafeInteger(n) && n >= min ? n : null;
}

/** The request the form stands for, or what to fix first. */
export function recordBody(d: RecordDraft): DraftResult {
  const m = model(d);
  if (typeof m === 'string') return { ok: false, problem: m };
  const c = corpus(d);
  if (typeof c === 'string') return { ok: false, problem: c };
  const context = wholeNumber(d.context, 16);
  if (context == null) return { ok: false, problem: `Tokens per window must be a whole number from 16 up (${DEFAULT_CONTEXT} shows KV cache effects; 512 hides them), not "${d.context}".` };
  let chunks: number | null = null;
  if (d.chunks.trim() !== '') {
    chunks = wholeNumber(d.chunks, 1);
    if (chunks == null) return { ok: false, problem: `Windows must be a whole number from 1 up, or blank for all of the corpus, not "${d.chunks}".` };
  }
  return { ok: true, body: { model: m, corpus: c, context, chunks } };
}

/** The references a KLD run can be measured against: recorded and ready, newest first. */
export function readyReferences(refs: readonly Reference[]): Reference[] {
  return refs.filter((r) => r.state === 'ready').sort((a, b) => b.created_at_ms - a.created_at_ms);
}

/** One KLD run per picked profile against the reference, named "kld <profile>". */
export function kldRuns(profiles: readonly string[], reference: string): NewKldRun[] {
  return profiles.map((name) => ({ name: `kld ${name}`, kind: 'kld', target: { kind: 'profile', name }, kld: { reference } }));
}
