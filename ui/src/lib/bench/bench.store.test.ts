// The Benchmarks page's flows against a hand-answered API: the list read (with events that came
// meanwhile laid over it), a run started and opened, a refusal shown in the daemon's words, the
// open run read again after its events (never two reads at once, at most one a second), live
// telemetry for a running run, cancel and delete, picks for comparing, a reload mid-run showing
// the same from the API alone, and a 401 signing out.

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { detail, digest, point, probeAnswers, probeDetail, probeSummary, summary, telemetryPoint } from '../../test/bench';
import { frame, gpu } from '../../test/frames';
import { flush, pendingCalls, withApi } from '../../test/pending';

const { calls, pending, take, answer } = pendingCalls();

vi.mock('../api/client', (orig) =>
  withApi(orig, {
    instances: () => pending('instances'),
    profiles: () => pending('profiles'),
  }),
);
vi.mock('./client', async (orig) => ({
  ...(await orig<typeof import('./client')>()),
  benchApi: {
    runs: () => pending('runs'),
    run: (id: number) => pending('run', id),
    start: (body: unknown) => pending('start', body),
    cancel: (id: number) => pending('cancel', id),
    remove: (id: number) => pending('remove', id),
  },
}));

const { BenchState: Store, DETAIL_SPACING_MS } = await import('./bench.svelte');
/** Every store made, closed at each test's end so no timer outlives it. */
const made: InstanceType<typeof Store>[] = [];
class BenchState extends Store {
  constructor() {
    super();
    made.push(this);
  }
}
const { ApiError } = await import('../api/client');
const { buildRequest, defaultDraft } = await import('./draft');
const { progressText, qualityHeadline } = await import('./format');
const { byTarget, categoryRows } = await import('./quality');
const { compareRuns, splitPicks } = await import('./compare');

const running = (id: number, done: number, extra = {}) => summary(id, { status: 'running', runs_done: done, runs_total: 11, finished_at_ms: null, ...extra });

/** A store with the list shown. */
async function listed(runs = [summary(2), summary(1)]) {
  const s = new BenchState();
  const loading = s.load();
  await answer('runs', runs);
  await loading;
  return s;
}

/** A store with the list shown and run `id` open. */
async function opened(id: number, runs = [running(id, 3)], d = detail(id, { status: 'running' })) {
  const s = await listed(runs);
  s.open(id);
  await answer('run', d);
  return s;
}

describe('the benchmarks store', () => {
  beforeEach(() => {
    calls.length = 0;
  });
  afterEach(() => {
    for (const s of made.splice(0)) s.open(null);
    calls.length = 0;
    vi.useRealTimers();
  });

  it('lists the runs newest first, events during the read laid over its answer', async () => {
    const s = new BenchState();
    const loading = s.load();
    // The read was asked before these: the event is newer.
    s.ingest(running(3, 1));
    s.ingest(running(2, 5));
    await answer('runs', [running(2, 4), summary(1)]);
    await loading;
    expect(s.runs?.map((r) => [r.id, r.runs_done])).toEqual([
      [3, 1],
      [2, 5],
      [1, 11],
    ]);
    expect(s.runsError).toBeNull();
    // After the read, events update the list in place.
    s.ingest(running(3, 2));
    expect(s.runs?.[0]?.runs_done).toBe(2);
  });

  it('shows a failed read and clears it on the next', async () => {
    const s = new BenchState();
    const loading = s.load();
    take('runs').reject(new ApiError(503, 'no_database', 'benchmarks need the database'));
    await loading;
    expect(s.runsError).toEqual({ code: 'no_database', message: 'benchmarks need the database' });
    const again = s.load();
    await answer('runs', []);
    await again;
    expect(s.runsError).toBeNull();
    expect(s.runs).toEqual([]);
  });

  it('starts a run: listed at once, a second click meanwhile sends nothing', async () => {
    const s = await listed();
    const body = { target: { kind: 'instance' as const, name: 'qwen' }, spec: { concurrency: [1, 2, 4, 8] } };
    const starting = s.start(body);
    expect(s.starting).toBe(true);
    await expect(s.start(body)).resolves.toBeNull();
    const call = take('start');
    expect(call.arg).toEqual(body);
    call.resolve(running(3, 0));
    await expect(starting).resolves.toMatchObject({ id: 3 });
    expect(s.starting).toBe(false);
    expect(s.runs?.map((r) => r.id)).toEqual([3, 2, 1]);
  });

  it("shows the daemon's refusal of a benchmark as it says it", async () => {
    const s = await listed();
    const starting = s.start({ target: { kind: 'instance', name: 'gone' }, spec: {} });
    take('start').reject(new ApiError(400, 'invalid_benchmark', "no instance named 'gone' is running: start it first"));
    await expect(starting).resolves.toBeNull();
    expect(s.startError).toEqual({ code: 'invalid_benchmark', message: "no instance named 'gone' is running: start it first" });
    expect(s.runs?.map((r) => r.id)).toEqual([2, 1]);
  });

  it('opens a run once; opening it again reads nothing', async () => {
    const s = await opened(3);
    expect(s.detail?.id).toBe(3);
    expect(s.openSummary?.id).toBe(3);
    s.open(3);
    expect(calls).toEqual([]);
    s.open(null);
    expect(s.detail).toBeNull();
  });

  it('reads the open run again after its events: one read at a time, at most one a second', async () => {
    const s = await opened(3);
    vi.useFakeTimers();
    // Events for another run read nothing.
    s.ingest(summary(1));
    await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS);
    expect(calls).toEqual([]);
    // Three events in a row: one read, a second after the spacing.
    s.ingest(running(3, 4));
    s.ingest(running(3, 5));
    s.ingest(running(3, 6));
    expect(s.openSummary?.runs_done).toBe(6);
    await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS);
    expect(calls.map((c) => c.name)).toEqual(['run']);
    // Events while that read is out ask for one more after it, not a second at once.
    s.ingest(running(3, 7));
    s.ingest(running(3, 8));
    await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS * 3);
    expect(calls.map((c) => c.name)).toEqual(['run']);
    take('run').resolve(detail(3, { status: 'running', runs_done: 6 }));
    await vi.advanceTimersByTimeAsync(0);
    expect(s.detail?.runs_done).toBe(6);
    await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS);
    expect(calls.map((c) => c.name)).toEqual(['run']);
    take('run').resolve(detail(3, { status: 'done', runs_done: 11 }));
    await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS * 2);
    expect(calls).toEqual([]);
    expect(s.detail?.status).toBe('done');
  });

  it('drops the answer for a run no longer open', async () => {
    const s = await listed([summary(2), summary(1)]);
    s.open(1);
    s.open(2);
    const [first, second] = [take('run'), take('run')];
    expect([first.arg, second.arg]).toEqual([1, 2]);
    second.resolve(detail(2));
    await flush();
    first.resolve(detail(1));
    await flush();
    expect(s.detail?.id).toBe(2);
  });

  it('shows an unknown run as the daemon says', async () => {
    const s = await listed();
    s.open(99);
    take('run').reject(new ApiError(404, 'no_such_run', 'no benchmark run with id 99: the Benchmarks page lists them'));
    await flush();
    expect(s.detailError?.code).toBe('no_such_run');
    expect(s.detail).toBeNull();
  });

  it('keeps live telemetry for the open running run, until a read brings it', async () => {
    const started = running(3, 3).started_at_ms;
    const s = await opened(3, [running(3, 3)], detail(3, { status: 'running', telemetry: [telemetryPoint(1000, [{ index: 0, util: 90 }])] }));
    s.ingestFrame(frame(started + 2000, [gpu(0)]));
    s.ingestFrame(frame(started + 3000, [gpu(0)]));
    expect(s.liveTelemetry.map((p) => p.t_ms)).toEqual([2000, 3000]);
    vi.useFakeTimers();
    s.readDetailSoon();
    await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS);
    expect(calls.map((c) => c.name)).toEqual(['run']);
    take('run').resolve(detail(3, { status: 'running', telemetry: [telemetryPoint(1000, []), telemetryPoint(2000, [])] }));
    await vi.advanceTimersByTimeAsync(0);
    expect(s.liveTelemetry.map((p) => p.t_ms)).toEqual([3000]);
    // A finished run takes no frames.
    s.ingest(summary(3, { started_at_ms: started }));
    s.ingestFrame(frame(started + 9000, [gpu(0)]));
    expect(s.liveTelemetry.map((p) => p.t_ms)).toEqual([3000]);
  });

  it('cancels a running run and shows a refusal by its run', async () => {
    const s = await listed([running(3, 3), summary(1)]);
    const cancelling = s.cancel(3);
    expect(s.busy[3]).toBe('cancel');
    await answer('cancel', summary(3, { status: 'cancelled', runs_done: 3 }));
    await expect(cancelling).resolves.toBe(true);
    expect(s.runs?.[0]?.status).toBe('cancelled');
    expect(s.busy).toEqual({});
    const again = s.cancel(3);
    take('cancel').reject(new ApiError(409, 'not_running', 'benchmark run 3 is not running'));
    await expect(again).resolves.toBe(false);
    expect(s.actionError).toEqual({ code: 'not_running', message: 'benchmark run 3 is not running', id: 3 });
  });

  it('deletes a run: it leaves the list, the picks and the detail', async () => {
    const s = await opened(2, [summary(2), summary(1)], detail(2));
    s.togglePick(1);
    s.togglePick(2);
    expect(s.pickedRuns.map((r) => r.id)).toEqual([1, 2]);
    const removing = s.remove(2);
    await answer('remove', undefined);
    await expect(removing).resolves.toBe(true);
    expect(s.runs?.map((r) => r.id)).toEqual([1]);
    expect(s.picked).toEqual([1]);
    expect(s.openId).toBeNull();
    expect(s.detail).toBeNull();
  });

  it('picks runs to compare in order, the first the base', async () => {
    const s = await listed([summary(3), summary(2), summary(1)]);
    s.togglePick(2);
    s.togglePick(3);
    s.togglePick(1);
    s.togglePick(3);
    expect(s.pickedRuns.map((r) => r.id)).toEqual([2, 1]);
    s.clearPicks();
    expect(s.picked).toEqual([]);
  });

  it('shows the same after a reload mid-run: everything from the API', async () => {
    const mid = running(3, 5, { steps: [] });
    const before = await opened(3, [mid], detail(3, { status: 'running', runs_done: 5 }));
    const fresh = new BenchState();
    const loading = fresh.load();
    fresh.open(3);
    await answer('runs', [mid]);
    await loading;
    await answer('run', detail(3, { status: 'running', runs_done: 5 }));
    expect(fresh.runs).toEqual(before.runs);
    expect(fresh.detail).toEqual(before.detail);
    // The stream reconnecting reads both again.
    vi.useFakeTimers();
    fresh.resync();
    await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS);
    expect(calls.map((c) => c.name).sort()).toEqual(['run', 'runs']);
  });

  it('reads the targets, one failing leaving the other', async () => {
    const s = new BenchState();
    const loading = s.loadTargets();
    take('instances').reject(new ApiError(500, 'db', 'database is locked'));
    await answer('profiles', [{ name: 'qwen' }]);
    await loading;
    expect(s.instances).toBeNull();
    expect(s.profiles?.map((p) => p.name)).toEqual(['qwen']);
    expect(s.targetsError).toEqual({ code: 'db', message: 'database is locked' });
  });

  it('signs out on a 401', async () => {
    const s = new BenchState();
    const out = vi.fn();
    s.setUnauthorizedHandler(out);
    const loading = s.load();
    take('runs').reject(new ApiError(401, 'unauthorized', 'sign in'));
    await loading;
    expect(out).toHaveBeenCalledTimes(1);
    expect(s.runsError).toBeNull();
  });

  describe('a quality probe', () => {
    const probing = (answered: number, passed: Record<string, number> = {}) =>
      probeSummary(4, probeAnswers(passed, answered), { status: 'running', finished_at_ms: null, target: { kind: 'instance', name: 'qwen' } });

    it('starts from the form, answers arriving as events, the open probe read again with them', async () => {
      const s = await listed([summary(2), summary(1)]);
      const built = buildRequest({ ...defaultDraft(), kind: 'quality', instance: 'qwen', probeMaxTokens: 24 });
      if (!built.ok) throw new Error(built.message);
      const starting = s.start(built.body);
      const call = take('start');
      expect(call.arg).toEqual({
        kind: 'quality',
        target: { kind: 'instance', name: 'qwen' },
        probe: { max_tokens: 24, concurrency: 4, request_timeout_s: 600, count: 250, seed: 1 },
      });
      call.resolve(probing(0));
      await expect(starting).resolves.toMatchObject({ id: 4, kind: 'quality' });
      expect(s.runs?.map((r) => r.id)).toEqual([4, 2, 1]);
      expect(qualityHeadline(s.runs?.[0]?.quality)).toBe('no answer yet');

      s.open(4);
      await answer('run', probeDetail(4, [], { status: 'running', finished_at_ms: null }));
      expect(s.detail?.answers).toEqual([]);
      vi.useFakeTimers();
      s.ingest(probing(12, { arithmetic: 6, units: 1 }));
      expect(progressText(s.openSummary!)).toBe('12 / 30 answered');
      expect(qualityHeadline(s.openSummary?.quality)).toBe('passed 7 of 12: 58 % (95 % interval 32–81 %)');
      await vi.advanceTimersByTimeAsync(DETAIL_SPACING_MS);
      expect(calls.map((c) => c.name)).toEqual(['run']);
      take('run').resolve(probeDetail(4, probeAnswers({ arithmetic: 6, units: 1 }, 12), { status: 'running', finished_at_ms: null }));
      await vi.advanceTimersByTimeAsync(0);
      expect(s.detail?.answers).toHaveLength(12);
      expect(categoryRows(s.detail?.quality).map((c) => [c.category, c.passed, c.total])).toEqual([
        ['arithmetic', 6, 6],
        ['units', 1, 6],
      ]);

      // Done: the list says so, and the target's pass rate sits beside its speed.
      s.ingest(probeSummary(4, probeAnswers({ arithmetic: 6, units: 1 }), { target: { kind: 'instance', name: 'qwen' } }));
      expect(s.runs?.[0]?.status).toBe('done');
      expect(byTarget(s.runs ?? [])).toEqual([
        expect.objectContaining({ label: 'qwen', speed: expect.objectContaining({ id: 2 }), quality: expect.objectContaining({ id: 4, passed: 7, answered: 30 }) }),
      ]);
    });

    it('shows the daemon’s refusal of a probe as it says it', async () => {
      const s = await listed();
      const starting = s.start({ kind: 'quality', target: { kind: 'instance', name: 'qwen' }, probe: { max_tokens: 8 } });
      take('start').reject(new ApiError(400, 'invalid_benchmark', 'quality probe max_tokens 8: use 16 to 65536 (reasoning models need a few thousand)'));
      await expect(starting).resolves.toBeNull();
      expect(s.startError?.message).toMatch(/reasoning models need a few thousand/);
    });

    it('picked with speed benchmarks, is compared apart from them', async () => {
      const speedA = summary(3, { steps: [digest(point(256, 512), { aggregate_tps: 40 })] });
      const speedB = summary(1, { steps: [digest(point(256, 512), { aggregate_tps: 60 })] });
      const s = await listed([probeSummary(5), probeSummary(4), speedA, speedB]);
      s.togglePick(5);
      s.togglePick(3);
      s.togglePick(1);
      const { speed, quality } = splitPicks(s.pickedRuns);
      expect(quality.map((r) => r.id)).toEqual([5]);
      expect(compareRuns(speed).rows[0]?.cells.map((c) => c?.aggregateRatio)).toEqual([null, 1.5]);
    });

    it('shows the same after a reload mid-probe: everything from the API', async () => {
      const mid = probing(9, { arithmetic: 6 });
      const d = probeDetail(4, probeAnswers({ arithmetic: 6 }, 9), { status: 'running', finished_at_ms: null });
      const before = await opened(4, [mid], d);
      const fresh = new BenchState();
      const loading = fresh.load();
      fresh.open(4);
      await answer('runs', [mid]);
      await loading;
      await answer('run', d);
      expect(fresh.runs).toEqual(before.runs);
      expect(fresh.detail).toEqual(before.detail);
      expect(fresh.detail?.answers).toHaveLength(9);
    });
  });
});
