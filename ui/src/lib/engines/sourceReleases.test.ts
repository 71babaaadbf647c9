// The newer-source offer: which kinds are asked about, and what an answer offers.

import { describe, expect, it } from 'vitest';
import type { EngineBuild, EngineVersions } from '../api/types';
import { kindsWithBuilds, newerSource, newerSourceText, releasesKey } from './sourceReleases';

function build(kind: string, version: string): EngineBuild {
  return {
    id: 1,
    kind,
    version,
    backend: 'cpu',
    cuda_architectures: null,
    location: '/x',
    capabilities: {},
    source: 'built',
    created_at_ms: 0,
    status: 'ready',
  } as EngineBuild;
}

const answer: EngineVersions = {
  kind: 'llama.cpp',
  package: 'llama-cpp-python',
  versions: ['0.3.40', '0.3.38', '0.3.36'],
  default: '0.3.36',
  pinned: '0.3.36',
  installed: ['0.3.36'],
  newer: ['0.3.40', '0.3.38'],
};

describe('kindsWithBuilds', () => {
  it('asks only about the source kinds that have a build', () => {
    expect(kindsWithBuilds([build('vllm', '0.33.0')])).toEqual([]);
    expect(kindsWithBuilds([build('ik_llama.cpp', 'py0.1.5'), build('llama.cpp', '0c1e570')])).toEqual([
      'llama.cpp',
      'ik_llama.cpp',
    ]);
  });

  it('keys the answer on the source builds alone', () => {
    const a = [build('llama.cpp', '0c1e570'), build('vllm', '0.33.0')];
    const b = [build('vllm', '0.34.0'), build('llama.cpp', '0c1e570')];
    expect(releasesKey(a)).toBe(releasesKey(b));
    expect(releasesKey([...a, build('llama.cpp', 'py0.3.40')])).not.toBe(releasesKey(a));
  });
});

describe('newerSource', () => {
  it('offers the newest newer release, naming what it is newer than', () => {
    const offer = newerSource('llama.cpp', answer);
    expect(offer?.release).toBe('0.3.40');
    expect(newerSourceText(offer!)).toBe(
      'llama.cpp: llama-cpp-python 0.3.40 on the package index is newer than the bundled 0.3.36 and your builds (0.3.36).',
    );
  });

  it('offers nothing once the newest is built', () => {
    expect(newerSource('llama.cpp', { ...answer, installed: ['0.3.40', '0.3.36'], newer: [] })).toBeNull();
  });
});
