// The download store: loaded once, then kept by events; an action's answer or a fetched list that
// is older than an event changes nothing the event said.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { DownloadView } from '../api/types';
import { view } from '../../test/downloads';

const GIB = 1024 ** 3;

/** Each call waits for the test to answer it, so the test decides what arrives first. */
const calls: { name: string; resolve: (v: unknown) => void; reject: (e: unknown) => void }[] = [];
function pending<T>(name: string): Promise<T> {
  return new Promise<T>((resolve, reject) => calls.push({ name, resolve: resolve as (v: unknown) => void, reject }));
}
async function answer(name: string, value: unknown): Promise<void> {
  const i = calls.findIndex((c) => c.name === name);
  if (i < 0) throw new Error(`no pending call ${name}; have ${calls.map((c) => c.name).join(', ')}`);
  calls.splice(i, 1)[0]!.resolve(value);
  await new Promise((r) => setTimeout(r, 0));
}

vi.mock('../api/client', async (orig) => {
  const real = await orig<typeof import('../api/client')>();
  return {
    ...real,
    api: {
      downloads: () => pending<DownloadView[]>('list'),
      downloadAction: (id: number, action: string) => pending<DownloadView>(`${action} ${id}`),
      forgetDownload: (id: number) => pending<{ removed: number }>(`forget ${id}`),
      createDownload: (body: { repo: string; quant?: string }) => pending<DownloadView>(`create ${body.repo}:${body.quant}`),
    },
  };
});

const { downloads } = await import('./downloads.svelte');
const { ApiError } = await import('../api/client');

function states(): [number, string][] {
  return downloads.items.map((d) => [d.id, d.state]);
}

describe('the download store', () => {
  beforeEach(() => {
    calls.length = 0;
  });

  it('loads the list, keeping a state event that came while it was fetched', async () => {
    const loading = downloads.ensure();
    expect(downloads.loading).toBe(true);
    downloads.ingest('state', view(2, 'done', 4 * GIB, { paths: ['/hub/x.gguf'] }));
    await answer('list', [view(2, 'running', GIB), view(1, 'failed', 0, { error: 'hub unreachable' })]);
    await loading;
    expect(downloads.loaded).toBe(true);
    expect(states()).toEqual([
      [2, 'done'],
      [1, 'failed'],
    ]);
    // Already loaded: no second request.
    await downloads.ensure();
    expect(calls).toEqual([]);
  });

  it('follows progress, and ignores a report that arrives after the pause', async () => {
    downloads.ingest('state', view(3, 'queued'));
    downloads.ingest('progress', view(3, 'running', GIB));
    expect(downloads.items[0]!.progress.done_bytes).toBe(GIB);
    downloads.ingest('state', view(3, 'paused', GIB));
    downloads.ingest('progress', view(3, 'running', 2 * GIB));
    expect(downloads.items[0]!.state).toBe('paused');
    expect(downloads.items[0]!.progress.done_bytes).toBe(GIB);
  });

  it("drops an action's answer when the state event came first", async () => {
    downloads.ingest('state', view(4, 'running', GIB));
    const pausing = downloads.act(4, 'pause');
    expect(downloads.busy[4]).toBe('pause');
    // The worker stops and announces `paused` before the HTTP answer (still `running`) is read.
    downloads.ingest('state', view(4, 'paused', GIB));
    await answer('pause 4', view(4, 'running', GIB));
    await pausing;
    expect(downloads.items.find((d) => d.id === 4)!.state).toBe('paused');
    expect(downloads.busy[4]).toBeUndefined();
  });

  it("takes an action's answer when no event came (the socket is down, say)", async () => {
    const resuming = downloads.act(3, 'resume');
    await answer('resume 3', view(3, 'queued', GIB));
    await resuming;
    expect(downloads.items.find((d) => d.id === 3)!.state).toBe('queued');
  });

  it("shows a refused action's message by its download", async () => {
    const retrying = downloads.act(2, 'retry');
    calls.splice(0, 1)[0]!.reject(new ApiError(409, 'download', 'download #2 is Done; it cannot be retried'));
    await retrying;
    expect(downloads.actionError).toEqual({ id: 2, code: 'download', message: 'download #2 is Done; it cannot be retried' });
  });

  it('removes a forgotten download with the answer', async () => {
    const removing = downloads.act(1, 'remove');
    await answer('forget 1', { removed: 1 });
    await removing;
    expect(downloads.items.some((d) => d.id === 1)).toBe(false);
    expect(downloads.actionError).toBeNull();
  });

  it('adds a started download and passes the refusal on', async () => {
    const starting = downloads.start({ repo: 'org/new', quant: 'Q8_0' });
    await answer('create org/new:Q8_0', view(9, 'queued', 0, { repo: 'org/new', label: 'Q8_0' }));
    await starting;
    expect(downloads.items[0]!.id).toBe(9);
    const refused = downloads.start({ repo: 'org/new', quant: 'Q' });
    calls.splice(0, 1)[0]!.reject(new ApiError(400, 'bad_request', "'Q' could mean Q4_K_M, Q8_0: write one of them in full"));
    await expect(refused).rejects.toThrow(/could mean/);
  });

  it('loads again on resync', async () => {
    const again = downloads.resync();
    await answer('list', [view(9, 'running', GIB, { repo: 'org/new', label: 'Q8_0' })]);
    await again;
    expect(states()).toEqual([[9, 'running']]);
  });
});
