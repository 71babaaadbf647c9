// The Tuning half's flows against a hand-answered API: the list read (with events that came
// meanwhile laid over it), events keeping a tuning current trial by trial, one the list lacks
// read on its own when opened, a start and a refusal in the daemon's words, cancel, delete, saving
// the best (then read again to show the profile's name), a reload mid-tuning showing the same from
// the API alone, the `bench.tune` event parsed, and a 401 signing out.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { flush, pendingCalls } from '../../test/pending';
import { trial, tuneView } from '../../test/tune';
import { stats } from '../../test/bench';

const { calls, pending, take, answer } = pendingCalls();

vi.mock('./tuneClient', () => ({
  tuneApi: {
    list: () => pending('list'),
    get: (id: number) => pending('get', id),
    start: (body: unknown) => pending('start', body),
    cancel: (id: number) => pending('cancel', id),
    remove: (id: number) => pending('remove', id),
    save: (id: number, name: string) => pending('save', { id, name }),
  },
}));

const { TuneState } = await import('./tune.svelte');
const { ApiError } = await import('../api/client');
const { parseServerMessage } = await import('../api/events');
const { buildTune, defaultTuneDraft, newKnob } = await import('./tuneDraft');

const running = (id: number, trials = tuneView(id).trials.slice(0, 1)) => tuneView(id, { status: 'running', trials, finished_at_ms: null });

async function listed(list = [tuneView(2), tuneView(1)]) {
  const s = new TuneState();
  const loading = s.load();
  await answer('list', list);
  await loading;
  return s;
}

describe('the tuning store', () => {
  beforeEach(() => {
    calls.length = 0;
  });
  afterEach(() => {
    calls.length = 0;
  });

  it('lists the tunings newest first, events during the read laid over its answer', async () => {
    const s = new TuneState();
    const loading = s.load();
    s.ingest(running(3));
    s.ingest(running(2, tuneView(2).trials.slice(0, 2)));
    await answer('list', [running(2), tuneView(1)]);
    await loading;
    expect(s.tunes?.map((t) => [t.id, t.trials.length])).toEqual([
      [3, 1],
      [2, 2],
      [1, 3],
    ]);
    expect(s.tunesError).toBeNull();
  });

  it('keeps a running tuning current, trial by trial, from its events', async () => {
    const s = await listed([running(2)]);
    s.open(2);
    expect(calls).toEqual([]);
    const next = trial(1, { ubatch: '64' }, null, { outcome: 'running', decision: null, run_id: null });
    s.ingest(running(2, [...tuneView(2).trials.slice(0, 1), next]));
    expect(s.openTune?.trials.map((t) => t.outcome)).toEqual(['measured', 'running']);
    const best = { trial: 1, values: { ubatch: '64' }, objective: stats([50, 51, 52]), baseline: stats([40, 41, 42]), gain_percent: 24.4 };
    s.ingest(tuneView(2, { best }));
    expect(s.openTune?.status).toBe('done');
    expect(s.openTune?.best?.gain_percent).toBe(24.4);
  });

  it('reads a tuning the list lacks when it is opened, and says when there is none', async () => {
    const s = await listed([tuneView(1)]);
    s.open(5);
    const call = take('get');
    expect(call.arg).toBe(5);
    call.resolve(tuneView(5));
    await flush();
    expect(s.openTune?.id).toBe(5);
    s.open(9);
    take('get').reject(new ApiError(404, 'not_found', 'no tuning run 9'));
    await flush();
    expect(s.openError).toEqual({ code: 'not_found', message: 'no tuning run 9' });
    s.open(null);
    expect(s.openError).toBeNull();
  });

  it('reads the open one after the list when the page opened on its address', async () => {
    const s = new TuneState();
    s.open(4);
    expect(calls).toEqual([]);
    const loading = s.load();
    await answer('list', [tuneView(1)]);
    await loading;
    expect(take('get').arg).toBe(4);
  });

  it('starts a tuning from the form: listed at once; a second click meanwhile sends nothing', async () => {
    const s = await listed([tuneView(1)]);
    const built = buildTune({ ...defaultTuneDraft(), profile: 'tiny', strategy: 'grid', knobs: [{ ...newKnob('ubatch'), values: '64, 128' }] });
    if (!built.ok) throw new Error(built.message);
    const starting = s.start(built.body);
    expect(s.starting).toBe(true);
    await expect(s.start(built.body)).resolves.toBeNull();
    const call = take('start');
    expect(call.arg).toMatchObject({ profile: 'tiny', spec: { strategy: 'grid', knobs: [{ name: 'ubatch', values: ['64', '128'] }] } });
    call.resolve(running(2, []));
    await expect(starting).resolves.toMatchObject({ id: 2 });
    expect(s.tunes?.map((t) => t.id)).toEqual([2, 1]);
  });

  it('shows a refusal in the daemon’s words', async () => {
    const s = await listed();
    const starting = s.start({ profile: 'tiny', spec: { knobs: [{ name: 'speed', values: ['1'] }] } });
    take('start').reject(new ApiError(400, 'invalid_tuning', "'speed' is not a knob: use one of threads, …"));
    await expect(starting).resolves.toBeNull();
    expect(s.startError).toEqual({ code: 'invalid_tuning', message: "'speed' is not a knob: use one of threads, …" });
    expect(s.starting).toBe(false);
  });

  it('cancels, and deletes one that ended', async () => {
    const s = await listed([running(2), tuneView(1)]);
    const cancelling = s.cancel(2);
    expect(s.busy).toEqual({ 2: 'cancel' });
    await answer('cancel', tuneView(2, { status: 'cancelled', error: 'cancelled; the trials measured before are kept' }));
    await expect(cancelling).resolves.toBe(true);
    expect(s.tunes?.[0]?.status).toBe('cancelled');
    expect(s.busy).toEqual({});
    const removing = s.remove(1);
    await answer('remove', undefined);
    await expect(removing).resolves.toBe(true);
    expect(s.tunes?.map((t) => t.id)).toEqual([2]);
  });

  it('keeps a refused action with the tuning and the action', async () => {
    const s = await listed();
    const removing = s.remove(2);
    take('remove').reject(new ApiError(409, 'running', 'tuning run 2 is still running: cancel it first'));
    await expect(removing).resolves.toBe(false);
    expect(s.actionError).toEqual({ code: 'running', message: 'tuning run 2 is still running: cancel it first', id: 2, action: 'delete' });
    expect(s.tunes).toHaveLength(2);
  });

  it('saves the best as a new profile, then reads the tuning again to show it', async () => {
    const s = await listed();
    const saving = s.save(2, 'tiny-tuned');
    expect(s.busy).toEqual({ 2: 'save' });
    const result = { profile: { name: 'tiny-tuned' }, warnings: ['no plan yet'], argv: null, command_line: 'llama-server …', build_missing: false };
    expect((await answer('save', result)).arg).toEqual({ id: 2, name: 'tiny-tuned' });
    expect(s.saved).toEqual({ id: 2, result });
    const read = await answer('get', tuneView(2, { saved_profile: 'tiny-tuned' }));
    expect(read.arg).toBe(2);
    await expect(saving).resolves.toBe(true);
    expect(s.tunes?.find((t) => t.id === 2)?.saved_profile).toBe('tiny-tuned');
    expect(s.busy).toEqual({});
  });

  it('says why there was nothing to save', async () => {
    const s = await listed();
    const saving = s.save(1, 'tiny-tuned');
    take('save').reject(new ApiError(400, 'invalid_tuning', 'tuning run 1 has no trial that beat the profile as it was beyond the noise'));
    await expect(saving).resolves.toBe(false);
    expect(s.actionError).toMatchObject({ id: 1, action: 'save', code: 'invalid_tuning' });
    expect(s.saved).toBeNull();
  });

  it('shows a tuning in progress after a reload, from the API alone', async () => {
    const before = running(3, tuneView(3).trials.slice(0, 2));
    const s = new TuneState();
    s.open(3);
    const loading = s.load();
    await answer('list', [before, tuneView(1)]);
    await loading;
    expect(calls).toEqual([]);
    expect(s.openTune).toEqual(before);
  });

  it('reads the list again on resync, not before it was read once', async () => {
    const s = new TuneState();
    s.resync();
    expect(calls).toEqual([]);
    const listedOnce = await listed();
    listedOnce.resync();
    expect(take('list')).toBeTruthy();
  });

  it('signs out on a 401', async () => {
    const s = new TuneState();
    const out = vi.fn();
    s.setUnauthorizedHandler(out);
    const loading = s.load();
    take('list').reject(new ApiError(401, 'unauthorized', 'sign in'));
    await loading;
    expect(out).toHaveBeenCalledTimes(1);
    expect(s.tunesError).toBeNull();
  });
});

describe('bench.tune events', () => {
  it('carry the tuning whole', () => {
    const view = running(4);
    expect(parseServerMessage(JSON.stringify({ type: 'bench.tune', data: view }))).toEqual({ ok: true, event: { type: 'bench.tune', data: view } });
  });
  it('without id, status or trials are refused, not fatal', () => {
    expect(parseServerMessage(JSON.stringify({ type: 'bench.tune', data: { id: 4, status: 'running' } }))).toEqual({ ok: false, error: 'bench.tune needs id, status and trials' });
  });
});
