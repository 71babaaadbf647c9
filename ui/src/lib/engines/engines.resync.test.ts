// After the daemon says events were dropped (`resync`), the engines view is fetched again:
// instances, profiles, builds and status, and the log tail of every instance whose log it holds,
// joined with what it had.

import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { LogLine } from '../api/types';

const calls: string[] = [];
const tail: LogLine[] = [
  { name: 'tiny', seq: 7, at_ms: 0, stream: 'stdout', text: 'line 7' } as LogLine,
  { name: 'tiny', seq: 8, at_ms: 0, stream: 'stdout', text: 'line 8' } as LogLine,
];

vi.mock('../api/client', async (orig) => {
  const real = await orig<typeof import('../api/client')>();
  const answer = <T>(name: string, value: T) => {
    calls.push(name);
    return Promise.resolve(value);
  };
  return {
    ...real,
    api: {
      engines: () => answer('engines', []),
      profiles: () => answer('profiles', []),
      instances: () => answer('instances', [{ name: 'tiny', phase: 'ready' }]),
      status: () => answer('status', { engines_at_start: null }),
      instanceLogs: (name: string, q: { tail?: number }) => answer(`logs ${name} tail ${q.tail}`, tail),
    },
  };
});

const { engines } = await import('./engines.svelte');

describe('resync', () => {
  beforeEach(() => {
    calls.length = 0;
  });

  it('fetches the view again and the held log tails, keeping what it had', async () => {
    engines.ingestLog({ name: 'tiny', seq: 3, at_ms: 0, stream: 'stdout', text: 'line 3' } as LogLine);
    await engines.resync();
    expect(calls.sort()).toEqual(['engines', 'instances', 'logs tiny tail 200', 'profiles', 'status']);
    expect(engines.instances.map((v) => v.name)).toEqual(['tiny']);
    expect(engines.logs.tiny?.map((l) => l.seq)).toEqual([3, 7, 8]);
  });
});
