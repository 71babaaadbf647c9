// The profile editor's gateway section: read from a profile (defaults when absent), written back,
// bad input named.

import { describe, expect, it } from 'vitest';
import { applyGatewayForm, gatewayFormOf, parseAliases, type GatewayForm } from './profile';

const blank: GatewayForm = { aliases: '', onDemand: false, pinned: false, idleMinutes: null, maxConcurrent: null };

describe('gateway form', () => {
  it('reads the defaults for a profile without gateway settings', () => {
    expect(gatewayFormOf(undefined)).toEqual(blank);
    expect(gatewayFormOf({})).toEqual(blank);
  });

  it('reads aliases as text and the timeout in minutes', () => {
    expect(gatewayFormOf({ aliases: ['a', 'b'], on_demand: true, pinned: true, idle_ttl_s: 600, max_concurrent: 3 })).toEqual({
      aliases: 'a, b',
      onDemand: true,
      pinned: true,
      idleMinutes: 10,
      maxConcurrent: 3,
    });
    expect(gatewayFormOf({ idle_ttl_s: 90 }).idleMinutes).toBe(1.5);
  });

  it('splits aliases on commas, trimmed, without empties or repeats', () => {
    expect(parseAliases(' gpt-4o-mini, coder,, ,gpt-4o-mini ')).toEqual(['gpt-4o-mini', 'coder']);
    expect(parseAliases('')).toEqual([]);
  });

  it('writes empty boxes as never and unlimited', () => {
    expect(applyGatewayForm(blank)).toEqual({
      gateway: { aliases: [], on_demand: false, pinned: false, idle_ttl_s: null, max_concurrent: null },
    });
    // Svelte gives NaN for a number box it cannot read, null for an empty one.
    expect(applyGatewayForm({ ...blank, idleMinutes: Number.NaN })).toEqual(applyGatewayForm(blank));
  });

  it('writes the timeout in seconds and round-trips a profile', () => {
    const g = { aliases: ['small'], on_demand: true, pinned: false, idle_ttl_s: 1800, max_concurrent: 2 };
    expect(applyGatewayForm(gatewayFormOf(g))).toEqual({ gateway: g });
    expect(applyGatewayForm({ ...blank, idleMinutes: 1.5 })).toEqual({ gateway: expect.objectContaining({ idle_ttl_s: 90 }) });
  });

  it('names bad input', () => {
    // Names are the daemon's to check: a space inside one is allowed.
    expect(applyGatewayForm({ ...blank, aliases: 'gpt 4o, coder' })).toEqual({ gateway: expect.objectContaining({ aliases: ['gpt 4o', 'coder'] }) });
    expect(applyGatewayForm({ ...blank, idleMinutes: 0 })).toEqual({ error: expect.stringContaining('Stop when idle') });
    expect(applyGatewayForm({ ...blank, idleMinutes: -5 })).toEqual({ error: expect.stringContaining('Stop when idle') });
    expect(applyGatewayForm({ ...blank, maxConcurrent: 0 })).toEqual({ error: expect.stringContaining('Max concurrent') });
    expect(applyGatewayForm({ ...blank, maxConcurrent: 1.5 })).toEqual({ error: expect.stringContaining('whole number') });
  });
});
