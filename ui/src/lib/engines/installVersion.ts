// The version picker of the vLLM/SGLang install form (Engines page): the options a
// `GET /api/v1/engines/versions` answer gives ("newest (0.33.0)" first, every listed release,
// "other…" for one the list lacks), which choice stands when the list changes, and the version
// and body `POST /api/v1/engines/install` sends for a choice. When the index cannot be read the
// form falls back to a free-text field, where empty means the newest the daemon finds.

import type { EngineInstall, EngineVersions, PythonEngineKind } from '../api/types';

/** The choice that sends no version: the daemon installs the newest release the index serves. */
export const NEWEST = 'newest';
/** The choice that reveals the text field, for a version the list lacks. */
export const OTHER = 'other';

/** Typing an index URL pauses this long before the index is read. */
export const INDEX_DEBOUNCE_MS = 500;

export const ENGINE_LABELS: Record<PythonEngineKind, string> = { vllm: 'vLLM', sglang: 'SGLang' };

export interface VersionOption {
  /** NEWEST, OTHER or the version itself (a version starts with a digit, so they never clash). */
  value: string;
  label: string;
}

/** `list`: the select (read, or still being read); `typed`: the index could not be read, so only
 *  the text field. */
export type PickerMode = 'list' | 'typed';

/** The select's options for an answer (`null` while none is in: newest and other… only). */
export function versionOptions(answer: EngineVersions | null): VersionOption[] {
  const newest = answer?.default ?? answer?.versions[0] ?? null;
  const options: VersionOption[] = [{ value: NEWEST, label: newest ? `newest (${newest})` : 'newest' }];
  const seen = new Set<string>();
  for (const raw of answer?.versions ?? []) {
    const v = raw.trim();
    if (!v || seen.has(v) || v === NEWEST || v === OTHER) continue;
    seen.add(v);
    options.push({ value: v, label: v });
  }
  options.push({ value: OTHER, label: 'other…' });
  return options;
}

/** The choice that stands: the one wanted when the options hold it, else the newest. */
export function effectiveChoice(wanted: string, options: VersionOption[]): string {
  return options.some((o) => o.value === wanted) ? wanted : NEWEST;
}

/** What to select once a list arrives after the text field was the fallback: the version typed
 *  there (listed, or under other… with the text kept), else the newest. */
export function choiceAfterFallback(typed: string, answer: EngineVersions): string {
  const v = typed.trim();
  if (!v) return NEWEST;
  return answer.versions.some((listed) => listed.trim() === v) ? v : OTHER;
}

/** What `pip install pkg==V` takes (the daemon's own check): `0.33.0`, `0.5.3.post1`, `0.11.0rc2`. */
export function isPlainVersion(v: string): boolean {
  return /^[0-9][A-Za-z0-9.+\-_]*$/.test(v);
}

/** The version the install sends (`null`: none, the newest on the index), or why it cannot be
 *  sent yet. */
export function versionToSend(mode: PickerMode, choice: string, typed: string): { version: string | null } | { error: string } {
  if (mode === 'list' && choice === NEWEST) return { version: null };
  if (mode === 'list' && choice !== OTHER) return { version: choice };
  const v = typed.trim();
  if (!v) {
    return mode === 'typed' ? { version: null } : { error: 'Type the version to install, e.g. 0.33.0.' };
  }
  if (!isPlainVersion(v)) return { error: `"${v}" is not a plain version number, e.g. 0.33.0.` };
  return { version: v };
}

/** The install request's body: version and index only when given. */
export function installBody(kind: PythonEngineKind, version: string | null, indexUrl: string): EngineInstall {
  const body: EngineInstall = { kind };
  if (version) body.version = version;
  const index = indexUrl.trim();
  if (index) body.index_url = index;
  return body;
}

/** The install button's words for what `versionToSend` gave: `Install vLLM 0.11.0`,
 *  `Install vLLM (newest release)`, or just `Install vLLM` while the version is not one. */
export function installLabel(kind: PythonEngineKind, send: { version: string | null } | { error: string }): string {
  const engine = ENGINE_LABELS[kind];
  if ('error' in send) return `Install ${engine}`;
  return `Install ${engine} ${send.version ?? '(newest release)'}`;
}
