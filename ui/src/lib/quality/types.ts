// The quality API's shapes (/api/v1/quality): the corpora a reference is recorded on, the
// references (a model's next-token distributions over a corpus, recorded once by llama-perplexity
// and kept on disk), the estimate shown before one is recorded, a KLD run's result (a benchmark
// run of kind `kld`) and the frontier of one reference: decode speed against Mean KLD per profile.

import type { UnixMillis } from '../api/types';

/** What a reference is recorded on: the built-in corpus, a text file, or chat conversations. */
export type CorpusSpec = { kind: 'builtin' } | { kind: 'file'; path: string } | { kind: 'conversations'; ids: number[] };

/** The model a reference is recorded with: a model file, or a launch profile (its file and flags). */
export type ModelRef = { kind: 'file'; path: string } | { kind: 'profile'; name: string };

/** One part of the built-in corpus: prose, code, conversation, reasoning… in a language. */
export interface CorpusPart {
  name: string;
  kind: string;
  language: string;
  bytes: number;
}

/** A corpus' length in one model's tokens, counted when a reference was recorded on it. */
export interface TokenCount {
  corpus_label: string;
  corpus_sha256: string;
  model_name: string;
  tokens: number;
}

/** GET /quality/corpora. */
export interface Corpora {
  builtin: { label: string; bytes: number; parts: CorpusPart[] };
  token_counts: TokenCount[];
}

export type ReferenceState = 'recording' | 'ready' | 'failed';

/** How far a recording is: 0–1, and the seconds it has left when known. */
export interface RecordingProgress {
  fraction: number;
  eta_s: number | null;
}

/** A reference as GET /quality/references lists it and the `quality.reference` event carries it. */
export interface Reference {
  id: string;
  state: ReferenceState | (string & {});
  error: string | null;
  model_path: string;
  model_name: string;
  profile: string | null;
  corpus: CorpusSpec;
  corpus_label: string;
  /** Tokens per window (llama-perplexity's -c). */
  context: number;
  /** Windows scored; null: all the corpus holds. */
  chunks: number | null;
  scored_tokens: number | null;
  corpus_tokens: number | null;
  n_vocab: number | null;
  /** On disk; the estimate while recording. */
  bytes: number;
  engine: string;
  created_at_ms: UnixMillis;
  wall_s: number | null;
  progress: RecordingProgress | null;
}

/** GET /quality/references: the references and the disk they take against their budget. */
export interface ReferenceListing {
  references: Reference[];
  budget_bytes: number;
  used_bytes: number;
  free_disk_bytes: number | null;
}

/** POST /quality/references (and its estimate): `chunks` null scores every window. */
export interface NewReference {
  model: ModelRef;
  corpus: CorpusSpec;
  context: number;
  chunks: number | null;
}

/** POST /quality/references/estimate: what recording would take; `problem` says why it cannot. */
export interface ReferenceEstimate {
  corpus_tokens: number;
  chunks: number;
  scored_tokens: number;
  bytes: number;
  budget_bytes: number;
  used_bytes: number;
  free_disk_bytes: number | null;
  problem: string | null;
  /** What the recording leaves out or adds, in words ("not used for the recording: -np 4"). */
  notes?: string[];
  /** A ready reference recorded the same way: recording answers with it instead. */
  existing?: string | null;
}

/** A KLD run's figures, as llama-perplexity --kl-divergence prints them. `same_top`, `rms_dp` and
 *  `mean_dp` are fractions 0–1; each `_unc` is the uncertainty llama-perplexity gives with it. */
export interface KldResult {
  reference: string;
  mean: number;
  mean_unc: number;
  median: number;
  p99: number;
  p999: number;
  max: number;
  same_top: number;
  same_top_unc: number;
  rms_dp: number;
  rms_dp_unc: number;
  mean_dp: number;
  ppl: number;
  ppl_unc: number;
  ppl_base: number;
  ppl_ratio: number;
  ppl_ratio_unc: number;
  scored_tokens: number;
  context: number;
  chunks: number;
  wall_s: number;
  /** Plain words from the daemon: "top token unchanged on 99.1 % of tokens". */
  summary: string;
}

/** One measured profile of a reference: its latest KLD run and its latest decode speed. */
export interface FrontierPoint {
  profile: string;
  kld_run_id: number;
  mean: number;
  mean_unc: number;
  same_top: number;
  decode_tps: number | null;
  speed_run_id: number | null;
}

/** GET /quality/frontier?reference=ID. */
export interface Frontier {
  reference: Reference;
  points: FrontierPoint[];
}

/** A KLD run's spec: the reference it is measured against. */
export interface KldSpec {
  reference: string;
}

/** POST /bench/runs for a KLD measurement of a profile against a ready reference. */
export interface NewKldRun {
  name?: string;
  kind: 'kld';
  target: { kind: 'profile'; name: string };
  kld: KldSpec;
}
