// Who we are to the daemon: checking, signed out (show SignIn), unreachable, or ready with the
// server's status. `GET /api/v1/status` decides; a 401 anywhere later flips back to signed out.

import { api, ApiError } from '../api/client';
import type { ServerStatus } from '../api/types';

export type SessionPhase = 'checking' | 'signed_out' | 'unreachable' | 'ready';

class Session {
  phase = $state<SessionPhase>('checking');
  status = $state.raw<ServerStatus | null>(null);
  /** Why the daemon could not be reached, verbatim. */
  error = $state<string | null>(null);

  async check(): Promise<void> {
    try {
      this.status = await api.status();
      this.error = null;
      this.phase = 'ready';
    } catch (e) {
      const err = e instanceof ApiError ? e : new ApiError(0, 'unreachable', String(e));
      this.error = err.message;
      this.phase = err.unauthorized ? 'signed_out' : 'unreachable';
    }
  }

  /** Throws the daemon's ApiError (wrong token…) for the form to show. */
  async signIn(token: string): Promise<void> {
    await api.signIn(token);
    await this.check();
  }

  async signOut(): Promise<void> {
    try {
      await api.signOut();
    } finally {
      this.markSignedOut();
    }
  }

  markSignedOut(): void {
    this.status = null;
    this.phase = 'signed_out';
  }

  /** After PUT /settings the period changes; refresh what the Settings page shows. */
  async refreshStatus(): Promise<void> {
    try {
      this.status = await api.status();
    } catch (e) {
      if (e instanceof ApiError && e.unauthorized) this.markSignedOut();
    }
  }
}

export const session = new Session();
