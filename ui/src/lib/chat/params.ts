// The sampling form of a conversation: each field is text (empty: the engine's default), read into
// the conversation's params with its range checked, so a typo is named before anything is saved;
// and the reasoning choices.

import type { ChatParams, ReasoningEffort, ReasoningMode } from '../api/types';

export type SamplingKey = 'temperature' | 'top_p' | 'top_k' | 'min_p' | 'max_tokens';

export interface SamplingField {
  key: SamplingKey;
  label: string;
  min: number;
  max: number;
  integer: boolean;
  step: string;
  hint: string;
}

export const SAMPLING_FIELDS: SamplingField[] = [
  { key: 'temperature', label: 'Temperature', min: 0, max: 5, integer: false, step: '0.05', hint: 'Randomness: 0 always picks the likeliest token.' },
  { key: 'top_p', label: 'Top P', min: 0, max: 1, integer: false, step: '0.01', hint: 'Keep the likeliest tokens that together reach this probability.' },
  { key: 'top_k', label: 'Top K', min: 0, max: 1000, integer: true, step: '1', hint: 'Keep at most this many candidates (0: all).' },
  { key: 'min_p', label: 'Min P', min: 0, max: 1, integer: false, step: '0.01', hint: 'Drop tokens less likely than this share of the likeliest one.' },
  { key: 'max_tokens', label: 'Max tokens', min: 1, max: 10_000_000, integer: true, step: '1', hint: 'The longest reply, in tokens.' },
];

export type SamplingForm = Record<SamplingKey, string>;

export function samplingForm(params: ChatParams): SamplingForm {
  const f = {} as SamplingForm;
  for (const field of SAMPLING_FIELDS) {
    const v = params[field.key];
    f[field.key] = v == null ? '' : String(v);
  }
  return f;
}

export type SamplingRead = { ok: true; values: Pick<ChatParams, SamplingKey> } | { ok: false; errors: Partial<Record<SamplingKey, string>> };

/** The form's values, each within its range; empty fields are null (the engine's default). */
export function readSampling(form: SamplingForm): SamplingRead {
  const values: Pick<ChatParams, SamplingKey> = {};
  const errors: Partial<Record<SamplingKey, string>> = {};
  for (const field of SAMPLING_FIELDS) {
    const text = (form[field.key] ?? '').trim();
    if (text === '') {
      values[field.key] = null;
      continue;
    }
    const n = Number(text);
    if (!Number.isFinite(n)) errors[field.key] = `${field.label}: "${text}" is not a number`;
    else if (field.integer && !Number.isInteger(n)) errors[field.key] = `${field.label} is a whole number`;
    else if (n < field.min || n > field.max) errors[field.key] = `${field.label} goes from ${field.min} to ${field.max}`;
    else values[field.key] = n;
  }
  return Object.keys(errors).length > 0 ? { ok: false, errors } : { ok: true, values };
}

/** The params with the sampling values replaced (reasoning kept). */
export function withSampling(params: ChatParams, values: Pick<ChatParams, SamplingKey>): ChatParams {
  return { ...params, ...values };
}

export function sameParams(a: ChatParams, b: ChatParams): boolean {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)] as (keyof ChatParams)[]);
  for (const k of keys) if ((a[k] ?? null) !== (b[k] ?? null)) return false;
  return true;
}

export const REASONING_CHOICES: { value: ReasoningMode | null; label: string; hint: string }[] = [
  { value: null, label: 'Default', hint: 'As the model does by default' },
  { value: 'on', label: 'On', hint: 'Think before answering' },
  { value: 'off', label: 'Off', hint: 'Answer at once' },
];

export const EFFORT_CHOICES: { value: ReasoningEffort | null; label: string }[] = [
  { value: null, label: 'Default' },
  { value: 'low', label: 'Low' },
  { value: 'medium', label: 'Medium' },
  { value: 'high', label: 'High' },
];
