// The fleet overview, asked of the desk every second while the Fleet page is open, and once at
// sign-in for the menu (the Fleet item shows when a peer is paired).

import { request, ApiError } from '../api/client';
import type { FleetOverview } from './types';

const POLL_MS = 1000;

class FleetOverviewStore {
  overview = $state.raw<FleetOverview | null>(null);
  error = $state<string | null>(null);
  private timer: ReturnType<typeof setInterval> | null = null;
  private watchers = 0;

  /** Whether the menu shows Fleet: some peer is paired. */
  get hasPeers(): boolean {
    return (this.overview?.paired ?? 0) > 0;
  }

  async load(): Promise<void> {
    try {
      this.overview = await request<FleetOverview>('GET', '/api/v1/fleet/overview');
      this.error = null;
    } catch (e) {
      this.error = e instanceof ApiError ? e.message : String(e);
    }
  }

  /** Polls while some page watches; the returned function stops watching. */
  watch(): () => void {
    this.watchers += 1;
    if (!this.timer) {
      void this.load();
      this.timer = setInterval(() => void this.load(), POLL_MS);
    }
    return () => {
      this.watchers -= 1;
      if (this.watchers === 0 && this.timer) {
        clearInterval(this.timer);
        this.timer = null;
      }
    };
  }
}

export const fleetOverview = new FleetOverviewStore();
