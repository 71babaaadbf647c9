// While a paired rig is viewed, its live parts come through the desk's relay: its telemetry
// frame every second into the dashboard's live state, its instances every few seconds into the
// engines list (the desk's own event stream is about the desk, so it is not used for them).

import { api, request } from '../api/client';
import type { TelemetryFrame } from '../api/types';
import { engines } from '../engines/engines.svelte';

const FRAME_MS = 1000;
const INSTANCES_EVERY = 3;

/** Starts feeding `ingest` with the viewed rig's frames; the returned function stops it. */
export function feedRig(ingest: (frame: TelemetryFrame) => void, onError: (message: string | null) => void): () => void {
  let tick = 0;
  let lastAt = 0;
  const poll = async () => {
    tick += 1;
    try {
      const frame = await request<TelemetryFrame>('GET', '/api/v1/telemetry/latest');
      if (frame.sample.at_ms !== lastAt) {
        lastAt = frame.sample.at_ms;
        ingest(frame);
      }
      if (tick % INSTANCES_EVERY === 1) engines.setInstances(await api.instances());
      onError(null);
    } catch (e) {
      onError((e as Error).message);
    }
  };
  void poll();
  const timer = setInterval(() => void poll(), FRAME_MS);
  return () => clearInterval(timer);
}
