// The keys list: order, replacing a key, the name check.

import { describe, expect, it } from 'vitest';
import { key, T0 } from '../../test/gateway';
import { isRevoked, keyNameProblem, sortKeys, upsertKey } from './keys';

describe('API keys', () => {
  it('list active keys newest first, then revoked ones by when they were revoked', () => {
    const list = [
      key(1, 'old'),
      key(2, 'gone-early', { revoked_at_ms: T0 + 10_000 }),
      key(3, 'new'),
      key(4, 'gone-late', { revoked_at_ms: T0 + 20_000 }),
    ];
    expect(sortKeys(list).map((k) => k.name)).toEqual(['new', 'old', 'gone-late', 'gone-early']);
    expect(isRevoked(list[1]!)).toBe(true);
    expect(isRevoked(list[0]!)).toBe(false);
  });

  it('replace a key by id, or add it', () => {
    const list = [key(1, 'a'), key(2, 'b')];
    const revoked = key(2, 'b', { revoked_at_ms: T0 });
    expect(upsertKey(list, revoked)).toEqual([list[0], revoked]);
    expect(upsertKey(list, key(3, 'c')).map((k) => k.id)).toEqual([1, 2, 3]);
  });

  it('name an empty or taken name; a revoked key frees its name for this check', () => {
    const list = [key(1, 'laptop'), key(2, 'agent', { revoked_at_ms: T0 })];
    expect(keyNameProblem('  ', list)).toMatch(/Give the key a name/);
    expect(keyNameProblem(' laptop ', list)).toMatch(/exists already/);
    expect(keyNameProblem('agent', list)).toBeNull();
    expect(keyNameProblem('desktop', list)).toBeNull();
  });
});
