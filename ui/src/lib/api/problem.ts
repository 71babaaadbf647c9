// What a failed API call means to the page: a problem to show with the daemon's own message, or
// (a refused token) a sign-out, which the app turns into the sign-in page.

import { ApiError } from './client';

export interface Problem {
  code: string;
  message: string;
}

export function problemOf(e: unknown): Problem {
  if (e instanceof ApiError) return { code: e.code, message: e.message };
  return { code: 'error', message: e instanceof Error ? e.message : String(e) };
}

/** The problem to show, or `null` after `signOut` ran because the token was refused. */
export function problemOrSignOut(e: unknown, signOut: () => void): Problem | null {
  if (e instanceof ApiError && e.unauthorized) {
    signOut();
    return null;
  }
  return problemOf(e);
}
