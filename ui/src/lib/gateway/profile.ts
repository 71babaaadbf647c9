// The launch profile editor's "Gateway" section: the form's fields from a profile's `gateway`
// object (aliases as comma-separated text, the idle timeout in minutes) and back, with bad input
// named. Empty number fields mean "never" / "unlimited" (null on the wire).

import type { ProfileGateway } from '../api/types';

export interface GatewayForm {
  /** Comma-separated model names clients may use instead of the profile's name. */
  aliases: string;
  onDemand: boolean;
  pinned: boolean;
  /** Minutes; null (an empty box): never stopped for being idle. */
  idleMinutes: number | null;
  /** null (an empty box): unlimited. */
  maxConcurrent: number | null;
}

export function gatewayFormOf(g: ProfileGateway | null | undefined): GatewayForm {
  const ttl = g?.idle_ttl_s ?? null;
  return {
    aliases: (g?.aliases ?? []).join(', '),
    onDemand: g?.on_demand ?? false,
    pinned: g?.pinned ?? false,
    // Seconds set through the API that are not whole minutes show as a fraction (1.5).
    idleMinutes: ttl == null ? null : Math.round((ttl / 60) * 100) / 100,
    maxConcurrent: g?.max_concurrent ?? null,
  };
}

/** "a, b,,  c, a" → ["a", "b", "c"]: trimmed, empties and repeats dropped, order kept. */
export function parseAliases(text: string): string[] {
  const seen = new Set<string>();
  for (const part of text.split(',')) {
    const a = part.trim();
    if (a) seen.add(a);
  }
  return [...seen];
}

/** A number box's value: Svelte gives null (or NaN) for an empty or unreadable box. */
const blank = (v: number | null | undefined): boolean => v == null || (typeof v === 'number' && Number.isNaN(v));

/** The profile's `gateway` object from the form, or the first problem with it. */
export function applyGatewayForm(f: GatewayForm): { gateway: ProfileGateway } | { error: string } {
  // The daemon checks the names themselves (length, a name another profile uses).
  const aliases = parseAliases(f.aliases);
  let idle: number | null = null;
  if (!blank(f.idleMinutes)) {
    const m = f.idleMinutes as number;
    if (!Number.isFinite(m) || m <= 0) return { error: 'Stop when idle: a number of minutes above 0, or empty for never.' };
    idle = Math.max(1, Math.round(m * 60));
  }
  let max: number | null = null;
  if (!blank(f.maxConcurrent)) {
    const n = f.maxConcurrent as number;
    if (!Number.isInteger(n) || n < 1) return { error: 'Max concurrent requests: a whole number from 1, or empty for unlimited.' };
    max = n;
  }
  return { gateway: { aliases, on_demand: f.onDemand, pinned: f.pinned, idle_ttl_s: idle, max_concurrent: max } };
}
