// A profile's engine knobs and speculative decoding as the Engines page edits them: which knobs an
// engine has (with its real flag and a one-line explanation), which speculative methods a build
// offers (from what the daemon read off it), and the form read from and written back into the
// profile. The daemon checks everything again when the profile is saved.

import type { EngineBuild, EngineSettings, LaunchProfile, SpecMethod, Speculative } from '../api/types';

export type KnobKind = 'bool' | 'number' | 'text';

export interface Knob {
  key: keyof EngineSettings;
  label: string;
  kind: KnobKind;
  /** The flag (or variable) each engine that has the knob writes. */
  flags: Partial<Record<string, string>>;
  explain: string;
}

const LLAMA = ['llama.cpp', 'ik_llama.cpp'];

export const KNOBS: Knob[] = [
  {
    key: 'cpu_mask',
    label: 'CPU mask',
    kind: 'text',
    flags: { 'llama.cpp': '--cpu-mask', 'ik_llama.cpp': '--cpu-mask' },
    explain: 'The CPUs its threads may use, as hex (ff = CPUs 0–7): keep it on one socket or off the cores the GPU feeders use.',
  },
  {
    key: 'cpu_strict',
    label: 'Strict CPU placement',
    kind: 'bool',
    flags: { 'llama.cpp': '--cpu-strict 1', 'ik_llama.cpp': '--cpu-strict 1' },
    explain: 'One thread per CPU of the mask, in order, instead of letting the OS move them.',
  },
  {
    key: 'mlock',
    label: 'Lock weights in RAM',
    kind: 'bool',
    flags: { 'llama.cpp': '--mlock (or --load-mode mlock)', 'ik_llama.cpp': '--mlock' },
    explain: 'The weights are never swapped out; needs a memlock limit as large as the model.',
  },
  {
    key: 'no_mmap',
    label: 'Read weights instead of mapping',
    kind: 'bool',
    flags: { 'llama.cpp': '--no-mmap (or --load-mode none)', 'ik_llama.cpp': '--no-mmap' },
    explain: 'Slower to load, but the page cache holds no second copy of CPU-side experts.',
  },
  {
    key: 'run_time_repack',
    label: 'Repack at load',
    kind: 'bool',
    flags: { 'ik_llama.cpp': '-rtr' },
    explain: 'Weights repacked for faster CPU matmuls at load (they are read into RAM, not mapped).',
  },
  {
    key: 'mla',
    label: 'MLA mode',
    kind: 'number',
    flags: { 'ik_llama.cpp': '-mla' },
    explain: 'Latent attention for DeepSeek, Kimi and GLM-5 (1–3): 3 keeps the compressed cache and suits most GPUs.',
  },
  {
    key: 'attn_max_batch_mib',
    label: 'Attention buffer cap (MiB)',
    kind: 'number',
    flags: { 'ik_llama.cpp': '-amb' },
    explain: 'Caps the attention compute buffer: frees VRAM at long contexts for a little prompt speed.',
  },
  {
    key: 'cpu_offload_gb',
    label: 'CPU offload (GiB per GPU)',
    kind: 'number',
    flags: { vllm: '--cpu-offload-gb', sglang: '--cpu-offload-gb' },
    explain: 'Weights kept in CPU RAM and streamed in each step: fits a bigger model, at a cost in speed.',
  },
  {
    key: 'kv_cache_dtype',
    label: 'KV cache type',
    kind: 'text',
    flags: { vllm: '--kv-cache-dtype', sglang: '--kv-cache-dtype' },
    explain: 'auto, fp8, fp8_e4m3 or fp8_e5m2: fp8 holds twice the context in the same memory.',
  },
  {
    key: 'max_num_seqs',
    label: 'Sequences at once',
    kind: 'number',
    flags: { vllm: '--max-num-seqs', sglang: '--max-running-requests' },
    explain: 'Requests decoded together; fewer leaves more memory for each one’s context.',
  },
  {
    key: 'max_num_batched_tokens',
    label: 'Tokens per step',
    kind: 'number',
    flags: { vllm: '--max-num-batched-tokens', sglang: '--chunked-prefill-size' },
    explain: 'Prompt tokens processed per step: larger is faster prefill, and a larger activation buffer.',
  },
  {
    key: 'block_size',
    label: 'KV block size',
    kind: 'number',
    flags: { vllm: '--block-size', sglang: '--page-size' },
    explain: 'Tokens per KV cache block (vLLM’s default 16; some attention kernels want 32 or 64).',
  },
  {
    key: 'marlin_atomic_add',
    label: 'Marlin atomic add',
    kind: 'bool',
    flags: { vllm: 'VLLM_MARLIN_USE_ATOMIC_ADD=1' },
    explain: 'GPTQ/AWQ Marlin kernels reduce with atomic adds: faster at small batches (+6 tok/s in one user’s report).',
  },
];

/** The knobs an engine kind has. */
export function knobsFor(kind: string): Knob[] {
  return KNOBS.filter((k) => k.flags[kind] !== undefined);
}

export const METHOD_LABELS: Record<SpecMethod, string> = {
  draft_model: 'Draft model',
  mtp: 'MTP heads (the model’s own)',
  ngram: 'n-gram lookup (no second model)',
  eagle: 'EAGLE heads',
  eagle3: 'EAGLE-3 heads',
};

/** Each method and the names that mean it in an engine's own words. */
const METHOD_NAMES: Record<SpecMethod, string[]> = {
  draft_model: ['draft_model', 'STANDALONE'],
  mtp: ['mtp', 'draft-mtp', 'NEXTN'],
  ngram: ['ngram', 'ngram-mod', 'ngram-simple', 'ngram-map-k', 'ngram-cache', 'NGRAM'],
  eagle: ['eagle', 'EAGLE'],
  eagle3: ['eagle3', 'draft-eagle3', 'EAGLE3'],
};

/** The methods a build offers: its spec types (or package method list), its draft-model and MTP
 *  options. A vLLM/SGLang registered before their methods were read offers all of them. */
export function specMethodsFor(build: EngineBuild | undefined): SpecMethod[] {
  if (!build) return [];
  const features = build.capabilities?.features ?? {};
  const types = Array.isArray(features.speculative_types) ? features.speculative_types : [];
  const options = build.capabilities?.options ?? [];
  const python = build.kind === 'vllm' || build.kind === 'sglang';
  const all = Object.keys(METHOD_NAMES) as SpecMethod[];
  if (python && types.length === 0) return all;
  return all.filter((m) => {
    if (METHOD_NAMES[m].some((n) => types.includes(n))) return true;
    if (python) return false;
    if (m === 'draft_model') return ['-md', '--model-draft', '--spec-draft-model'].some((o) => options.includes(o));
    if (m === 'mtp') return ['-mtp', '--multi-token-prediction'].some((o) => options.includes(o));
    return false;
  });
}

/** Whether the engine's n-gram lookup takes a match length (SGLang's does not). */
export function hasMatchLength(kind: string): boolean {
  return kind !== 'sglang';
}

/** Whether the engine takes a minimum draft and probability (the llama.cpp family). */
export function hasDraftLimits(kind: string): boolean {
  return LLAMA.includes(kind);
}

export function needsDraftModel(method: SpecMethod | ''): boolean {
  return method === 'draft_model' || method === 'eagle' || method === 'eagle3';
}

/** The form: every value as typed ('' for unset). */
export interface EngineForm {
  values: Partial<Record<keyof EngineSettings, string | boolean>>;
  method: SpecMethod | '';
  tokens: string;
  draftModel: string;
  minTokens: string;
  pMin: string;
  ngramMatch: string;
}

export function engineFormOf(p: LaunchProfile): EngineForm {
  const values: EngineForm['values'] = {};
  for (const knob of KNOBS) {
    const v = p.engine?.[knob.key];
    values[knob.key] = knob.kind === 'bool' ? v === true : v === null || v === undefined ? '' : String(v);
  }
  const s = p.speculative;
  const text = (v: number | null | undefined) => (v === null || v === undefined ? '' : String(v));
  return {
    values,
    method: s?.method ?? '',
    tokens: String(s?.tokens ?? 3),
    draftModel: s?.draft_model ?? '',
    minTokens: text(s?.min_tokens),
    pMin: text(s?.p_min),
    ngramMatch: text(s?.ngram_match),
  };
}

/** A number field: '' is unset; anything else must be a number (an integer where asked). */
function numberOf(text: string, label: string, integer: boolean): { value: number | null } | { error: string } {
  const t = text.trim();
  if (t === '') return { value: null };
  const n = Number(t);
  if (!Number.isFinite(n) || n < 0 || (integer && !Number.isInteger(n))) {
    return { error: `${label} must be ${integer ? 'a whole number' : 'a number'} of 0 or more, or empty.` };
  }
  return { value: n };
}

/** The profile with the engine form applied (only `kind`'s knobs), or the first problem. */
export function applyEngineForm(
  p: LaunchProfile,
  form: EngineForm,
  kind: string,
): { profile: LaunchProfile } | { error: string } {
  const engine: EngineSettings = {};
  for (const knob of knobsFor(kind)) {
    const raw = form.values[knob.key];
    if (knob.kind === 'bool') {
      (engine as Record<string, unknown>)[knob.key] = raw === true;
    } else if (knob.kind === 'text') {
      const t = typeof raw === 'string' ? raw.trim() : '';
      (engine as Record<string, unknown>)[knob.key] = t === '' ? null : t;
    } else {
      const n = numberOf(typeof raw === 'string' ? raw : '', knob.label, knob.key !== 'cpu_offload_gb');
      if ('error' in n) return n;
      (engine as Record<string, unknown>)[knob.key] = n.value;
    }
  }
  let speculative: Speculative | null = null;
  if (form.method !== '') {
    const tokens = numberOf(form.tokens, 'Draft tokens', true);
    if ('error' in tokens) return tokens;
    if (tokens.value === null || tokens.value < 1) return { error: 'Draft tokens must be 1 or more (2–4 is typical).' };
    const minTokens = numberOf(form.minTokens, 'Minimum draft', true);
    if ('error' in minTokens) return minTokens;
    const pMin = numberOf(form.pMin, 'Minimum probability', false);
    if ('error' in pMin) return pMin;
    const ngramMatch = numberOf(form.ngramMatch, 'Match length', true);
    if ('error' in ngramMatch) return ngramMatch;
    const draft = form.draftModel.trim();
    if (needsDraftModel(form.method) && draft === '') {
      return { error: `${METHOD_LABELS[form.method]} needs the path of the draft checkpoint.` };
    }
    const llama = LLAMA.includes(kind);
    speculative = {
      method: form.method,
      tokens: tokens.value,
      draft_model: needsDraftModel(form.method) ? draft : null,
      min_tokens: llama ? minTokens.value : null,
      p_min: llama ? pMin.value : null,
      ngram_match: form.method === 'ngram' && hasMatchLength(kind) ? ngramMatch.value : null,
    };
  }
  return { profile: { ...p, engine, speculative } };
}
