// The Engines page's profile settings: what a user edits after saving a profile (autostart,
// restart policy, address, API key, environment, how the gateway serves it), read from and written
// back into the profile.

import type { LaunchProfile, RestartPolicy } from '../api/types';
import { applyGatewayForm, gatewayFormOf, type GatewayForm } from '../gateway/profile';

export interface ProfileSettings {
  autostart: boolean;
  restartOnFailure: boolean;
  maxRestarts: number;
  host: string;
  /** 0: a free port at each start. */
  port: number;
  /** Empty: none. */
  apiKey: string;
  /** KEY=VALUE, one a line. */
  env: string;
  /** The gateway section (lib/gateway/profile.ts). */
  gateway: GatewayForm;
}

const DEFAULT_RESTART = { max_restarts: 3, initial_backoff_ms: 1000, max_backoff_ms: 30000 };

export function settingsOf(p: LaunchProfile): ProfileSettings {
  const restart = p.restart ?? { policy: 'on_failure', ...DEFAULT_RESTART };
  return {
    autostart: p.autostart ?? false,
    restartOnFailure: restart.policy === 'on_failure',
    maxRestarts: restart.policy === 'on_failure' ? restart.max_restarts : DEFAULT_RESTART.max_restarts,
    host: p.host ?? '127.0.0.1',
    port: p.port ?? 0,
    apiKey: p.api_key ?? '',
    env: Object.entries(p.env ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join('\n'),
    gateway: gatewayFormOf(p.gateway),
  };
}

/** `KEY=VALUE` lines into a map; blank lines skipped. The first bad line is named. */
export function parseEnv(text: string): { env: Record<string, string> } | { error: string } {
  const env: Record<string, string> = {};
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (!line) continue;
    const eq = line.indexOf('=');
    const key = eq > 0 ? line.slice(0, eq).trim() : '';
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
      return { error: `Environment line ${i + 1} ("${line}") is not KEY=VALUE with a name of letters, digits and _.` };
    }
    env[key] = line.slice(eq + 1);
  }
  return { env };
}

/** The profile with the settings applied, or the first problem with them. */
export function applySettings(p: LaunchProfile, s: ProfileSettings): { profile: LaunchProfile } | { error: string } {
  if (!Number.isInteger(s.port) || s.port < 0 || s.port > 65535) {
    return { error: 'The port is a number from 1 to 65535, or 0 for a free one at each start.' };
  }
  if (s.restartOnFailure && (!Number.isInteger(s.maxRestarts) || s.maxRestarts < 1)) {
    return { error: 'Restarts must be 1 or more (or turn restarting off).' };
  }
  const parsed = parseEnv(s.env);
  if ('error' in parsed) return parsed;
  const gw = applyGatewayForm(s.gateway);
  if ('error' in gw) return gw;
  const previous = p.restart?.policy === 'on_failure' ? p.restart : { policy: 'on_failure' as const, ...DEFAULT_RESTART };
  const restart: RestartPolicy = s.restartOnFailure ? { ...previous, max_restarts: s.maxRestarts } : { policy: 'never' };
  return {
    profile: {
      ...p,
      autostart: s.autostart,
      restart,
      host: s.host.trim() || '127.0.0.1',
      port: s.port,
      api_key: s.apiKey.trim() || null,
      env: parsed.env,
      gateway: gw.gateway,
    },
  };
}
