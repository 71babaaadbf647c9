// Quality answers for the Quality section's tests: references, estimates, KLD results and frontier
// points, shaped as the daemon sends them.

import type { FrontierPoint, KldResult, Reference, ReferenceEstimate } from '../lib/quality/types';
import { T0 } from './bench';

export function reference(id: string, extra: Partial<Reference> = {}): Reference {
  return {
    id,
    state: 'ready',
    error: null,
    model_path: `/models/${id}.gguf`,
    model_name: `model ${id}`,
    profile: null,
    corpus: { kind: 'builtin' },
    corpus_label: 'built-in v1',
    context: 8192,
    chunks: 4,
    scored_tokens: 16_384,
    corpus_tokens: 40_000,
    n_vocab: 262_144,
    bytes: 8_590_000_000,
    engine: 'llama.cpp b6000 (cpu)',
    created_at_ms: T0,
    wall_s: 120,
    progress: null,
    ...extra,
  };
}

export function estimate(extra: Partial<ReferenceEstimate> = {}): ReferenceEstimate {
  return {
    corpus_tokens: 9000,
    chunks: 4,
    scored_tokens: 1024,
    bytes: 1024 ** 3,
    budget_bytes: 20 * 1024 ** 3,
    used_bytes: 1024 ** 3,
    free_disk_bytes: 400 * 1024 ** 3,
    problem: null,
    ...extra,
  };
}

export function kld(extra: Partial<KldResult> = {}): KldResult {
  return {
    reference: 'ref1',
    mean: 0.0123,
    mean_unc: 0.0004,
    median: 0.004,
    p99: 0.15,
    p999: 0.6,
    max: 2.5,
    same_top: 0.991,
    same_top_unc: 0.002,
    rms_dp: 0.031,
    rms_dp_unc: 0.001,
    mean_dp: -0.0012,
    ppl: 10.2,
    ppl_unc: 0.3,
    ppl_base: 10.1,
    ppl_ratio: 1.0099,
    ppl_ratio_unc: 0.0004,
    scored_tokens: 16_384,
    context: 8192,
    chunks: 4,
    wall_s: 95,
    summary: 'top token unchanged on 99.1 % of tokens',
    ...extra,
  };
}

export function frontierPoint(profile: string, mean: number, decodeTps: number | null, extra: Partial<FrontierPoint> = {}): FrontierPoint {
  return { profile, kld_run_id: 1, mean, mean_unc: mean / 20, same_top: 1 - mean, decode_tps: decodeTps, speed_run_id: decodeTps == null ? null : 2, ...extra };
}
