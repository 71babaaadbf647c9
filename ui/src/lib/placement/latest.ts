// "Only the newest answer counts": every change in the editor asks the daemon for a new plan.
// Changes that come fast (typing a context length, several moves) are debounced; a request still
// running when a newer one starts is aborted, and an answer that arrives late is dropped.

export interface LatestOptions<Req, Res> {
  fetch: (req: Req, signal: AbortSignal) => Promise<Res>;
  onResult: (res: Res, req: Req) => void;
  onError: (err: unknown, req: Req) => void;
  /** True from a change until its answer (or error) is in. */
  onBusy?: (busy: boolean) => void;
  delayMs?: number;
  setTimer?: (fn: () => void, ms: number) => unknown;
  clearTimer?: (handle: unknown) => void;
}

export const DEBOUNCE_MS = 150;

function isAbortError(e: unknown): boolean {
  return (e as { name?: string } | null)?.name === 'AbortError';
}

export class LatestRequest<Req, Res> {
  private readonly o: Required<LatestOptions<Req, Res>>;
  private timer: unknown = null;
  private controller: AbortController | null = null;
  private seq = 0;

  constructor(opts: LatestOptions<Req, Res>) {
    this.o = {
      onBusy: () => {},
      delayMs: DEBOUNCE_MS,
      setTimer: (fn, ms) => setTimeout(fn, ms),
      clearTimer: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
      ...opts,
    };
  }

  /** Runs `req` after the debounce delay unless another change comes first. */
  schedule(req: Req): void {
    this.seq++;
    this.abortRunning();
    if (this.timer !== null) this.o.clearTimer(this.timer);
    this.o.onBusy(true);
    const mine = this.seq;
    this.timer = this.o.setTimer(() => {
      this.timer = null;
      if (mine === this.seq) void this.start(req, mine);
    }, this.o.delayMs);
  }

  /** Runs `req` now (a button press), replacing anything pending or running. */
  run(req: Req): Promise<void> {
    this.seq++;
    this.abortRunning();
    if (this.timer !== null) this.o.clearTimer(this.timer);
    this.timer = null;
    this.o.onBusy(true);
    return this.start(req, this.seq);
  }

  cancel(): void {
    this.seq++;
    this.abortRunning();
    if (this.timer !== null) this.o.clearTimer(this.timer);
    this.timer = null;
    this.o.onBusy(false);
  }

  private abortRunning(): void {
    this.controller?.abort();
    this.controller = null;
  }

  private async start(req: Req, mine: number): Promise<void> {
    const controller = new AbortController();
    this.controller = controller;
    try {
      const res = await this.o.fetch(req, controller.signal);
      if (mine !== this.seq || controller.signal.aborted) return;
      this.controller = null;
      this.o.onBusy(false);
      this.o.onResult(res, req);
    } catch (e) {
      if (mine !== this.seq || controller.signal.aborted || isAbortError(e)) return;
      this.controller = null;
      this.o.onBusy(false);
      this.o.onError(e, req);
    }
  }
}
