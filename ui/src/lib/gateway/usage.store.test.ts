// The usage store: the window asked for follows the range, a switch aborts the read in flight
// and only the newest answer counts, errors shown verbatim, a 401 signs out.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import { T0, usageReport } from '../../test/gateway';

const calls: { from: number; to: number; signal?: AbortSignal; resolve: (v: unknown) => void; reject: (e: unknown) => void }[] = [];
const flush = () => new Promise((r) => setTimeout(r, 0));

vi.mock('../api/client', async (orig) => {
  const real = await orig<typeof import('../api/client')>();
  return {
    ...real,
    api: {
      gatewayUsage: (from: number, to: number, signal?: AbortSignal) =>
        new Promise((resolve, reject) => calls.push({ from, to, signal, resolve, reject })),
    },
  };
});

const { UsageState } = await import('./usage.svelte');
const { ApiError } = await import('../api/client');

describe('the usage store', () => {
  beforeEach(() => {
    calls.length = 0;
  });

  it('asks for the last hour by default and keeps the window of its answer', async () => {
    const s = new UsageState(() => T0);
    const loading = s.load();
    expect(s.loading).toBe(true);
    expect(calls[0]).toMatchObject({ from: T0 - 3_600_000, to: T0 });
    calls[0]!.resolve(usageReport());
    await loading;
    expect(s.report?.totals.requests).toBe(3);
    expect(s.window).toEqual({ range: 'hour', from_ms: T0 - 3_600_000, to_ms: T0 });
    expect(s.loading).toBe(false);
    expect(s.stale).toBe(false);
  });

  it('aborts the read in flight on a range switch; the older answer is dropped', async () => {
    const s = new UsageState(() => T0);
    void s.load();
    s.setRange('week');
    expect(s.stale).toBe(false);
    expect(calls).toHaveLength(2);
    expect(calls[0]!.signal?.aborted).toBe(true);
    expect(calls[1]).toMatchObject({ from: T0 - 7 * 86_400_000, to: T0 });
    calls[1]!.resolve(usageReport({ totals: { requests: 99, errors: 0, prompt_tokens: 0, completion_tokens: 0 } }));
    await flush();
    calls[0]!.resolve(usageReport());
    await flush();
    expect(s.report?.totals.requests).toBe(99);
    expect(s.window?.range).toBe('week');
    // The same range again asks nothing.
    s.setRange('week');
    expect(calls).toHaveLength(2);
    // While a switch loads, the shown report is for the old range.
    s.setRange('day');
    expect(s.stale).toBe(true);
    expect(s.loading).toBe(true);
  });

  it("shows a failed read's message, and keeps the last report", async () => {
    const s = new UsageState(() => T0);
    const first = s.load();
    calls[0]!.resolve(usageReport());
    await first;
    const second = s.load();
    calls[1]!.reject(new ApiError(503, 'gateway_off', 'the gateway is not running'));
    await second;
    expect(s.error).toEqual({ code: 'gateway_off', message: 'the gateway is not running' });
    expect(s.report).not.toBeNull();
    expect(s.loading).toBe(false);
  });

  it('ignores its own abort when the page is left', async () => {
    const s = new UsageState(() => T0);
    const stop = s.watch(60_000, { hidden: () => false, onChange: () => () => {} });
    expect(calls).toHaveLength(1);
    stop();
    expect(calls[0]!.signal?.aborted).toBe(true);
    calls[0]!.reject(new DOMException('aborted', 'AbortError'));
    await flush();
    expect(s.error).toBeNull();
    expect(s.loading).toBe(false);
  });

  it('signs out on a 401', async () => {
    const s = new UsageState(() => T0);
    const out = vi.fn();
    s.setUnauthorizedHandler(out);
    const loading = s.load();
    calls[0]!.reject(new ApiError(401, 'unauthorized', 'sign in'));
    await loading;
    expect(out).toHaveBeenCalledOnce();
    expect(s.error).toBeNull();
  });
});
