// While a paired rig is viewed, its live events come through the desk's relay on the app's one
// event socket (lib/telemetry/live). This watch says, in the desk's own words, why that rig
// cannot be reached (the desk cannot reach it, or its daemon is down, and since when), by
// asking the rig's API through the relay every few seconds.

import { request } from '../api/client';

const CHECK_EVERY_MS = 3000;

/** Starts checking the viewed rig; `onProblem(null)` while it answers. Returns the stop. */
export function watchRigReach(onProblem: (message: string | null) => void): () => void {
  const check = async () => {
    try {
      await request<unknown>('GET', '/api/v1/telemetry/latest');
      onProblem(null);
    } catch (e) {
      onProblem((e as Error).message);
    }
  };
  void check();
  const timer = setInterval(() => void check(), CHECK_EVERY_MS);
  return () => clearInterval(timer);
}
