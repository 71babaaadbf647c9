// Reading the daemon's plan answers: a shape check before the editor indexes into one (a newer or
// broken daemon must not blank the page), and the text the Copy button puts on the clipboard.

import type { CommandLineResult, PlanResponse, PlanReport } from '../api/types';

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isNumberArray(v: unknown): v is number[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'number');
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}

function isDeviceId(v: unknown): boolean {
  return isObject(v) && (v.kind === 'cpu' || ((v.kind === 'gpu' || v.kind === 'rpc') && typeof v.index === 'number'));
}

/** What is wrong with a plan answer, or null when the editor can draw it. */
export function planResponseError(v: unknown): string | null {
  if (!isObject(v)) return 'the plan answer is not an object';
  if (typeof v.layers !== 'number') return 'the plan answer has no layer count';
  if (!isObject(v.model)) return 'the plan answer has no model summary';
  const r = v.report;
  if (!isObject(r)) return 'the plan answer has no report';
  if (!isObject(r.options) || !Array.isArray(r.options.overrides)) return 'the report has no placement options';
  if (!isObject(r.command_line) || !('Ok' in r.command_line || 'Err' in r.command_line)) {
    return 'the report has no command line';
  }
  if (!isStringArray(r.problems) || !isStringArray(r.notes)) return 'the report has no problems or notes list';
  if (!isObject(r.ceiling) || !isStringArray(r.ceiling.assumptions)) return 'the report has no speed ceiling';
  const p = r.plan;
  if (!isObject(p) || !Array.isArray(p.devices) || p.devices.length === 0) return 'the plan has no devices';
  for (const d of p.devices) {
    if (!isObject(d) || !isObject(d.spec) || !isObject(d.usage) || typeof d.overflow_bytes !== 'number') {
      return 'a plan device lacks its spec, usage or overflow';
    }
    if (!isDeviceId(d.spec.id) || typeof d.spec.capacity_bytes !== 'number') return 'a plan device has no id or capacity';
    const u = d.usage;
    for (const k of ['weights_bytes', 'kv_bytes', 'compute_bytes', 'overhead_bytes']) {
      if (typeof u[k] !== 'number') return `a plan device has no ${k}`;
    }
    if (!isNumberArray(u.layers) || !isNumberArray(u.expert_layers)) return 'a plan device has no layer lists';
  }
  if (!Array.isArray(p.kv_devices)) return 'the plan has no KV devices';
  return null;
}

export type ParseResult = { ok: true; response: PlanResponse } | { ok: false; error: string };

export function parsePlanResponse(v: unknown): ParseResult {
  const error = planResponseError(v);
  return error ? { ok: false, error } : { ok: true, response: v as PlanResponse };
}

/** The command line, or why the options cannot be written as flags. */
export function commandLine(r: Pick<PlanReport, 'command_line'>): { ok: true; text: string } | { ok: false; error: string } {
  const c: CommandLineResult = r.command_line;
  return 'Ok' in c ? { ok: true, text: c.Ok } : { ok: false, error: c.Err };
}

/** What Copy puts on the clipboard: the daemon's line exactly (it quotes `-ot` patterns for a
 *  POSIX shell), or nothing when the options cannot be written as flags. */
export function copyText(r: Pick<PlanReport, 'command_line'>): string | null {
  const c = commandLine(r);
  return c.ok ? c.text : null;
}

/** The speed ceiling as a headline: "≤ 10.9 tok/s decode", or null when it cannot be computed. */
export function ceilingText(tokensPerS: number | null): string | null {
  if (tokensPerS == null || !Number.isFinite(tokensPerS) || tokensPerS <= 0) return null;
  const digits = tokensPerS >= 100 ? 0 : 1;
  return `≤ ${tokensPerS.toFixed(digits)} tok/s decode`;
}

export type WordKind = 'program' | 'flag' | 'value' | 'override';

export interface Word {
  text: string;
  kind: WordKind;
}

/** Splits the daemon's command line into its shell words, quotes kept, for colouring: joined with
 *  single spaces the words give the line back exactly. */
export function commandWords(line: string): Word[] {
  const raw: string[] = [];
  let cur = '';
  let quoted = false;
  for (const ch of line) {
    if (ch === "'") quoted = !quoted;
    if (ch === ' ' && !quoted) {
      raw.push(cur);
      cur = '';
    } else {
      cur += ch;
    }
  }
  raw.push(cur);
  return raw.map((text, i) => {
    if (i === 0) return { text, kind: 'program' };
    if (/^-{1,2}[a-zA-Z]/.test(text)) return { text, kind: 'flag' };
    return { text, kind: raw[i - 1] === '-ot' ? 'override' : 'value' };
  });
}

/** Words grouped as a reader sees them: a flag with its value, or a lone word. */
export function commandGroups(words: Word[]): Word[][] {
  const groups: Word[][] = [];
  for (const w of words) {
    const last = groups.at(-1);
    if (last && last.length === 1 && last[0]!.kind === 'flag' && w.kind !== 'flag' && w.kind !== 'program') last.push(w);
    else groups.push([w]);
  }
  return groups;
}
