// Pairing from the Settings page: the daemon's fleet endpoints (identity, invites, join, peers,
// hello, remove) as the daemon answers them, and the texts the pairing form shows before and
// after a call (a join code's hint, a fingerprint shortened, an invite's countdown).

import { request } from '../api/client';

/** What every join code starts with (the digit is the format's version). */
export const JOIN_CODE_PREFIX = 'rdk1-';

/** Base32 characters of a code (without its prefix) below which it cannot hold a whole code:
 *  version, fingerprint, secret, expiry and checksum are 69 bytes, 110 base32 characters. */
const JOIN_CODE_MIN_BODY = 110;

/** `GET /api/v1/fleet`: who this daemon is to its peers. */
export interface FleetIdentity {
  name: string;
  fingerprint: string;
  /** The fleet listener's address, `null` when it is off. */
  listen: string | null;
  version: string;
}

/** `POST /api/v1/fleet/invites`'s answer. */
export interface FleetInvite {
  code: string;
  address: string;
  fingerprint: string;
  expires_at_ms: number;
}

/** A pinned peer as stored. */
export interface FleetPeer {
  name: string;
  fingerprint: string;
  /** `rig`: this daemon joined it; `desk`: it joined this daemon. */
  role: 'rig' | 'desk';
  address: string | null;
  paired_at_ms: number;
  updated_at_ms: number;
  last_answer_at_ms: number | null;
  silent_since_ms: number | null;
  last_problem: string | null;
}

/** A peer's hello over the channel. */
export interface FleetHello {
  name: string;
  version: string;
  time_ms: number;
}

/** `GET /api/v1/fleet/peers`: a peer and whether it answers now (`null`: this side cannot call it). */
export interface FleetPeerStatus extends FleetPeer {
  answering: boolean | null;
  hello: FleetHello | null;
}

/** `POST /api/v1/fleet/join`'s answer. */
export interface FleetJoined {
  peer: FleetPeer;
  already_paired: boolean;
  message: string;
}

export const fleetApi = {
  identity: () => request<FleetIdentity>('GET', '/api/v1/fleet'),
  invite: (address: string, ttlSecs: number) => request<FleetInvite>('POST', '/api/v1/fleet/invites', inviteBody(address, ttlSecs)),
  join: (code: string) => request<FleetJoined>('POST', '/api/v1/fleet/join', { code: code.trim() }),
  peers: () => request<FleetPeerStatus[]>('GET', '/api/v1/fleet/peers'),
  hello: (name: string) => request<FleetHello>('GET', `/api/v1/fleet/peers/${encodeURIComponent(name)}/hello`),
  remove: (name: string) => request<FleetPeer>('DELETE', `/api/v1/fleet/peers/${encodeURIComponent(name)}`),
};

/** The invite request: the address only when one is typed (else the listener's own). */
export function inviteBody(address: string, ttlSecs: number): { address?: string; ttl_secs: number } {
  const typed = address.trim();
  return typed ? { address: typed, ttl_secs: ttlSecs } : { ttl_secs: ttlSecs };
}

/** What is wrong with a pasted join code before it is sent (`null`: nothing this side can tell). */
export function joinCodeHint(text: string): string | null {
  const code = text.replace(/\s+/g, '').toLowerCase();
  if (!code) return 'Paste the code that `rigdeck fleet invite` (or the rig’s Settings page) showed.';
  if (!code.startsWith(JOIN_CODE_PREFIX)) {
    return `A join code starts with “${JOIN_CODE_PREFIX}”: copy the whole line from the rig.`;
  }
  const body = code.slice(JOIN_CODE_PREFIX.length);
  const bad = body.match(/[^a-z2-7]/);
  if (bad) return `“${bad[0]}” never appears in a join code: a typo; copy the code again from the rig.`;
  if (body.length < JOIN_CODE_MIN_BODY) return 'The code is cut short: copy the whole line from the rig.';
  return null;
}

/** `AB:CD:EF:01:…:9A:BC`: the first four and last two pairs, enough to compare by eye. */
export function shortFingerprint(fingerprint: string): string {
  const pairs = fingerprint.split(':');
  if (pairs.length <= 6) return fingerprint;
  return `${pairs.slice(0, 4).join(':')}:…:${pairs.slice(-2).join(':')}`;
}

/** 3 h 2 min, 9 min 58 s, 42 s: a countdown that moves every second under an hour. */
export function countdown(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (h > 0) return `${h} h ${m} min`;
  if (m > 0) return `${m} min ${s % 60} s`;
  return `${s} s`;
}

/** "expires in 9 min 58 s", or "expired 5 s ago" once its time is over. */
export function expiryText(expiresAtMs: number, nowMs: number): string {
  const left = expiresAtMs - nowMs;
  return left > 0 ? `expires in ${countdown(left)}` : `expired ${countdown(-left)} ago`;
}

/** What the other side runs with this code. */
export function joinCommand(code: string): string {
  return `rigdeck fleet join ${code}`;
}

/** What removing `peer` means, said before it is done. */
export function removeWarning(peer: Pick<FleetPeer, 'name' | 'role'>): string {
  const other = peer.role === 'rig' ? 'desk' : 'rig';
  return (
    `Remove the ${peer.role} “${peer.name}”? From now on this ${other} refuses it over the fleet channel. ` +
    `It keeps its own pin of this daemon until it is removed there too; pairing again needs a new join code.`
  );
}
