// The gateway store: both reads on their own (one failing leaves the other), only the newest
// answer counts, a created key is listed at once with its secret held until the page is left, a
// revoked key stays listed; refusals shown verbatim; a 401 signs out.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import { gatewayView, key, model, T0 } from '../../test/gateway';
import { flush, pendingCalls, withApi } from '../../test/pending';

const { calls, pending, take, answer } = pendingCalls();

vi.mock('../api/client', (orig) =>
  withApi(orig, {
    gateway: () => pending('gateway'),
    keys: () => pending('keys'),
    createKey: (name: string) => pending('create', name),
    revokeKey: (id: number) => pending(`revoke ${id}`),
  }),
);

const { GatewayState } = await import('./gateway.svelte');
const { ApiError } = await import('../api/client');

/** A store with both lists shown. */
async function shown(keys = [key(1, 'laptop')]) {
  const s = new GatewayState();
  const loading = s.load();
  await answer('gateway', gatewayView());
  await answer('keys', keys);
  await loading;
  return s;
}

describe('the gateway store', () => {
  beforeEach(() => {
    calls.length = 0;
  });

  it('reads the gateway and the keys, each on its own', async () => {
    const s = new GatewayState();
    const loading = s.load();
    expect(calls.map((c) => c.name).sort()).toEqual(['gateway', 'keys']);
    take('keys').reject(new ApiError(500, 'db', 'database is locked'));
    await answer('gateway', gatewayView([model('qwen3-8b', { state: 'loading', progress: 0.3 })]));
    await loading;
    expect(s.view?.models[0]?.state).toBe('loading');
    expect(s.viewError).toBeNull();
    expect(s.keys).toBeNull();
    expect(s.keysError).toEqual({ code: 'db', message: 'database is locked' });
    // The next read clears the error.
    const again = s.loadKeys();
    await answer('keys', []);
    await again;
    expect(s.keysError).toBeNull();
    expect(s.keys).toEqual([]);
  });

  it('keeps only the newest answer', async () => {
    const s = await shown();
    void s.loadView();
    void s.loadView();
    const [older, newer] = [take('gateway'), take('gateway')];
    newer.resolve(gatewayView([model('new')]));
    await flush();
    older.resolve(gatewayView([model('old')]));
    await flush();
    expect(s.view?.models.map((m) => m.name)).toEqual(['new']);
  });

  it('lists a created key at once, holds its secret, and drops an older list without it', async () => {
    const s = await shown();
    void s.loadKeys();
    const stale = take('keys');
    const creating = s.createKey('  agent ');
    expect(s.creating).toBe(true);
    // A second click meanwhile creates nothing.
    await expect(s.createKey('agent')).resolves.toBe(false);
    const c = take('create');
    expect(c.arg).toBe('agent');
    c.resolve({ key: key(2, 'agent'), secret: 'rdk-secret' });
    await expect(creating).resolves.toBe(true);
    expect(s.created).toEqual({ key: key(2, 'agent'), secret: 'rdk-secret' });
    expect(s.sortedKeys.map((k) => k.name)).toEqual(['agent', 'laptop']);
    stale.resolve([key(1, 'laptop')]);
    await flush();
    expect(s.keys?.map((k) => k.id)).toEqual([1, 2]);
    s.forgetSecret();
    expect(s.created).toBeNull();
  });

  it("shows the daemon's refusal of a name", async () => {
    const s = await shown();
    const creating = s.createKey('laptop');
    take('create').reject(new ApiError(409, 'key_name_taken', 'a key named "laptop" exists'));
    await expect(creating).resolves.toBe(false);
    expect(s.createError).toEqual({ code: 'key_name_taken', message: 'a key named "laptop" exists' });
    expect(s.created).toBeNull();
    expect(s.creating).toBe(false);
  });

  it('keeps a revoked key listed, greyed by its revocation time, and hides its secret', async () => {
    const s = await shown([key(1, 'laptop'), key(2, 'agent')]);
    const creating = s.createKey('tmp');
    await answer('create', { key: key(3, 'tmp'), secret: 'rdk-tmp' });
    await creating;
    const revoking = s.revokeKey(3);
    expect(s.revoking[3]).toBe(true);
    await answer('revoke 3', key(3, 'tmp', { revoked_at_ms: T0 + 60_000 }));
    await expect(revoking).resolves.toBe(true);
    expect(s.revoking).toEqual({});
    expect(s.created).toBeNull();
    expect(s.sortedKeys.map((k) => [k.name, k.revoked_at_ms])).toEqual([
      ['agent', null],
      ['laptop', null],
      ['tmp', T0 + 60_000],
    ]);
  });

  it('shows a refused revocation by its key', async () => {
    const s = await shown();
    const revoking = s.revokeKey(1);
    take('revoke 1').reject(new ApiError(404, 'not_found', 'no key 1'));
    await expect(revoking).resolves.toBe(false);
    expect(s.revokeError).toEqual({ code: 'not_found', message: 'no key 1', id: 1 });
  });

  it('polls while watched and forgets the secret when the page is left', async () => {
    const s = await shown();
    const creating = s.createKey('agent');
    await answer('create', { key: key(2, 'agent'), secret: 'rdk-x' });
    await creating;
    const never = { hidden: () => true, onChange: () => () => {} };
    const stop = s.watch(1000, never);
    expect(calls).toEqual([]);
    stop();
    expect(s.created).toBeNull();
    const visible = { hidden: () => false, onChange: () => () => {} };
    const stop2 = s.watch(60_000, visible);
    expect(calls.map((c) => c.name).sort()).toEqual(['gateway', 'keys']);
    stop2();
  });

  it('signs out on a 401', async () => {
    const s = new GatewayState();
    const out = vi.fn();
    s.setUnauthorizedHandler(out);
    const loading = s.load();
    take('gateway').reject(new ApiError(401, 'unauthorized', 'sign in'));
    take('keys').reject(new ApiError(401, 'unauthorized', 'sign in'));
    await loading;
    expect(out).toHaveBeenCalledTimes(2);
    expect(s.viewError).toBeNull();
    expect(s.keysError).toBeNull();
  });
});
