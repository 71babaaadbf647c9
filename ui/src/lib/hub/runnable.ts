// Whether a model can be run in one click, and why not: a recommended model, a hub
// quantization on the rig at the page's context, a model of the library. Each answer is `null`
// (runnable) or the one line a disabled Run button shows as its tooltip.

import type { FileGroup, ModelEntry, QuantFit, RecommendedModel, RunSource } from '../api/types';
import { formatBytes } from '../format/units';
import { speedText, verdictLabel, verdictTone } from './fit';
import type { Tone } from '../engines/instances';

/** A recommended model's card: its verdict chip, size, speed ceiling and whether Run is offered. */
export interface RecommendedCard {
  tone: Tone;
  verdict: string;
  size: string;
  speed: string;
  /** Why Run is disabled, or null. */
  blocked: string | null;
  source: RunSource;
}

export function recommendedCard(m: RecommendedModel): RecommendedCard {
  return {
    tone: verdictTone(m.verdict),
    verdict: m.fits ? verdictLabel(m.verdict) : `does not fit: ${verdictLabel(m.verdict)}`,
    size: formatBytes(m.total_bytes),
    speed: speedText(m.tokens_per_s),
    blocked: m.fits ? null : `${m.repo} ${m.quant} does not fit this rig: ${m.summary}`,
    source: { kind: 'hub', repo: m.repo, quant: m.quant },
  };
}

/** Why a hub quantization cannot be run on the rig the fit planned, or null. A quantization not
 *  planned yet may run (the daemon checks the fit again before downloading). */
export function quantRunBlock(quant: FileGroup, fit: QuantFit | null): string | null {
  if (quant.missing) return 'This upload is incomplete: it cannot be run';
  if (!fit) return null;
  if (!fit.verdict) return `Its fit is unknown: ${fit.error ?? fit.summary}`;
  if (fit.verdict.kind === 'does_not_fit') return `${quant.label} does not fit this rig (${fit.summary}): choose a smaller quantization`;
  return null;
}

/** Why a model of the library cannot be run in one click, or null. */
export function modelRunBlock(model: ModelEntry): string | null {
  if (model.problem) return model.problem;
  if (model.format !== 'gguf') return 'A safetensors folder runs with vLLM or SGLang: use "Serve with vLLM / SGLang"';
  return null;
}
