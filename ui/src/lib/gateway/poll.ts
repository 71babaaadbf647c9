// Refreshing a page's data every few seconds while it is on screen: the timer runs only while the
// browser tab is visible, and a tab coming back asks at once. Each tick waits for the previous
// call to finish, so a slow daemon is never asked twice at a time.

/** The tab's visibility; the default reads `document`, tests pass their own. */
export interface Visibility {
  hidden(): boolean;
  /** Calls `fn` when visibility changes; returns the unsubscribe. */
  onChange(fn: () => void): () => void;
}

export const documentVisibility: Visibility = {
  hidden: () => typeof document !== 'undefined' && document.visibilityState === 'hidden',
  onChange: (fn) => {
    if (typeof document === 'undefined') return () => {};
    document.addEventListener('visibilitychange', fn);
    return () => document.removeEventListener('visibilitychange', fn);
  },
};

/** Calls `tick` now and then every `intervalMs` while visible; returns the stop function. */
export function poll(tick: () => Promise<unknown> | void, intervalMs: number, visibility: Visibility = documentVisibility): () => void {
  let timer: ReturnType<typeof setTimeout> | null = null;
  let running = false;
  let stopped = false;

  const schedule = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (!stopped && !visibility.hidden()) timer = setTimeout(() => void run(), intervalMs);
  };

  async function run(): Promise<void> {
    if (stopped || running) return;
    if (timer) clearTimeout(timer);
    timer = null;
    running = true;
    try {
      await tick();
    } catch {
      // The caller's tick shows its own errors; polling goes on.
    } finally {
      running = false;
      schedule();
    }
  }

  const unsubscribe = visibility.onChange(() => {
    if (visibility.hidden()) {
      if (timer) clearTimeout(timer);
      timer = null;
    } else {
      void run();
    }
  });
  if (!visibility.hidden()) void run();

  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    timer = null;
    unsubscribe();
  };
}
