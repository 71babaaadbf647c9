// Hand-answered API calls for store tests: a mocked API method returns `pending(name, arg)`, a
// promise that waits until the test takes the call by name and resolves or rejects it, so the test
// decides what arrives first. `calls` lists the calls not answered yet.

export interface PendingCall {
  name: string;
  arg?: unknown;
  resolve: (v: unknown) => void;
  reject: (e: unknown) => void;
}

/** Lets the store's awaits after an answer run before the test goes on. */
export const flush = () => new Promise((r) => setTimeout(r, 0));

/** One test file's unanswered calls, with the means to make and answer them. */
export function pendingCalls() {
  const calls: PendingCall[] = [];

  /** A call that waits for the test to answer it. */
  function pending<T>(name: string, arg?: unknown): Promise<T> {
    return new Promise<T>((resolve, reject) => calls.push({ name, arg, resolve: resolve as (v: unknown) => void, reject }));
  }

  /** The oldest unanswered call with this name, taken off the list (it throws when there is none). */
  function take(name: string): PendingCall {
    const i = calls.findIndex((c) => c.name === name);
    if (i < 0) throw new Error(`no pending ${name}; have ${calls.map((c) => c.name).join(', ')}`);
    return calls.splice(i, 1)[0]!;
  }

  /** Resolves the call with this name, then lets the store take the answer in. */
  async function answer(name: string, value: unknown): Promise<PendingCall> {
    const c = take(name);
    c.resolve(value);
    await flush();
    return c;
  }

  return { calls, pending, take, answer };
}

/** For a `vi.mock('…/api/client', (orig) => withApi(orig, {…}))` factory: the real client module
 *  (ApiError and the rest) with `api` swapped for the given methods. */
export async function withApi(importOriginal: () => Promise<object>, api: object): Promise<object> {
  return { ...(await importOriginal()), api };
}
