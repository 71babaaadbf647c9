import { describe, expect, it } from 'vitest';
import { relayedPath, storedRig, VIEWED_RIG_KEY } from './viewing';

describe('relayedPath', () => {
  it('leaves every path alone on the desk', () => {
    expect(relayedPath('/api/v1/instances', null)).toBe('/api/v1/instances');
  });

  it('sends a rig page’s calls through the relay, query included', () => {
    expect(relayedPath('/api/v1/instances', 'tower')).toBe('/api/v1/fleet/peers/tower/api/v1/instances');
    expect(relayedPath('/api/v1/telemetry/history?range=1h', 'mini')).toBe(
      '/api/v1/fleet/peers/mini/api/v1/telemetry/history?range=1h',
    );
  });

  it('keeps the desk’s session, status and fleet on the desk', () => {
    for (const path of ['/api/v1/session', '/api/v1/status', '/api/v1/fleet/overview', '/api/v1/fleet']) {
      expect(relayedPath(path, 'tower')).toBe(path);
    }
    expect(relayedPath('/api/v1/events', 'tower')).toBe('/api/v1/fleet/peers/tower/api/v1/events');
    expect(relayedPath('/api/v1/fleetwide', 'tower')).toBe('/api/v1/fleet/peers/tower/api/v1/fleetwide');
    expect(relayedPath('/login', 'tower')).toBe('/login');
  });
});

describe('storedRig', () => {
  const storage = (value: string | null) => ({ getItem: (key: string) => (key === VIEWED_RIG_KEY ? value : null) });

  it('reads a rig name, and nothing else', () => {
    expect(storedRig(storage('tower'))).toBe('tower');
    expect(storedRig(storage(null))).toBeNull();
    expect(storedRig(storage('../fleet'))).toBeNull();
    expect(storedRig(null)).toBeNull();
  });
});
