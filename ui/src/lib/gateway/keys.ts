// The API keys list: active keys first (newest first), revoked ones after (most recently revoked
// first), and the name check done before asking the daemon (which has the last word).

import type { ApiKeyView } from '../api/types';

export function isRevoked(k: Pick<ApiKeyView, 'revoked_at_ms'>): boolean {
  return k.revoked_at_ms != null;
}

export function sortKeys(list: readonly ApiKeyView[]): ApiKeyView[] {
  return [...list].sort((a, b) => {
    const ra = isRevoked(a);
    const rb = isRevoked(b);
    if (ra !== rb) return ra ? 1 : -1;
    if (ra && rb) return (b.revoked_at_ms ?? 0) - (a.revoked_at_ms ?? 0) || b.id - a.id;
    return b.created_at_ms - a.created_at_ms || b.id - a.id;
  });
}

/** Adds or replaces one key (by id) in a list. */
export function upsertKey(list: readonly ApiKeyView[], k: ApiKeyView): ApiKeyView[] {
  const i = list.findIndex((x) => x.id === k.id);
  return i >= 0 ? list.map((x, j) => (j === i ? k : x)) : [...list, k];
}

/** Why a name cannot be used, or null. A taken name is only refused among active keys. */
export function keyNameProblem(name: string, list: readonly ApiKeyView[]): string | null {
  const n = name.trim();
  if (!n) return 'Give the key a name (who or what uses it).';
  if (list.some((k) => !isRevoked(k) && k.name === n)) return `A key named "${n}" exists already.`;
  return null;
}
