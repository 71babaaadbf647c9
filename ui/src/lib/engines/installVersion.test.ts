// The install form's version picker: the options an answer gives, the choice that stands as the
// list changes, and the version and body the install sends for each choice.

import { describe, expect, it } from 'vitest';
import type { EngineVersions } from '../api/types';
import {
  NEWEST,
  OTHER,
  choiceAfterFallback,
  effectiveChoice,
  installBody,
  installLabel,
  isPlainVersion,
  versionOptions,
  versionToSend,
} from './installVersion';

/** An answer with nothing installed: no pin (a Python engine), every release newer. */
function answer(kind: string, versions: string[], fallback: string | null): EngineVersions {
  return { kind, package: kind, versions, default: fallback, pinned: null, installed: [], newer: versions };
}

const vllm = answer('vllm', ['0.33.0', '0.11.0', '0.10.2'], '0.33.0');

describe('versionOptions', () => {
  it('puts the newest first (naming it), then every listed release, then other…', () => {
    expect(versionOptions(vllm)).toEqual([
      { value: NEWEST, label: 'newest (0.33.0)' },
      { value: '0.33.0', label: '0.33.0' },
      { value: '0.11.0', label: '0.11.0' },
      { value: '0.10.2', label: '0.10.2' },
      { value: OTHER, label: 'other…' },
    ]);
  });

  it('offers newest and other… while no list is in', () => {
    expect(versionOptions(null)).toEqual([
      { value: NEWEST, label: 'newest' },
      { value: OTHER, label: 'other…' },
    ]);
  });

  it('names the pinned fallback when the index lists nothing, and skips blanks and repeats', () => {
    expect(versionOptions(answer('sglang', [], '0.5.23')).map((o) => o.label)).toEqual([
      'newest (0.5.23)',
      'other…',
    ]);
    const odd = versionOptions(answer('vllm', ['1.0.0', ' ', '1.0.0', '0.9.0'], null));
    expect(odd.map((o) => o.label)).toEqual(['newest (1.0.0)', '1.0.0', '0.9.0', 'other…']);
  });
});

describe('the choice that stands', () => {
  const options = versionOptions(vllm);

  it('keeps a listed version, newest and other…; anything else falls back to the newest', () => {
    expect(effectiveChoice('0.11.0', options)).toBe('0.11.0');
    expect(effectiveChoice(NEWEST, options)).toBe(NEWEST);
    expect(effectiveChoice(OTHER, options)).toBe(OTHER);
    // Another engine's version, or a list not in yet.
    expect(effectiveChoice('0.5.23', options)).toBe(NEWEST);
    expect(effectiveChoice('0.11.0', versionOptions(null))).toBe(NEWEST);
  });

  it('keeps a version typed while the index could not be read once the list arrives', () => {
    expect(choiceAfterFallback(' 0.11.0 ', vllm)).toBe('0.11.0');
    expect(choiceAfterFallback('0.9.1', vllm)).toBe(OTHER);
    expect(choiceAfterFallback('  ', vllm)).toBe(NEWEST);
  });
});

describe('versionToSend', () => {
  it('sends no version for the newest and the listed one as it is', () => {
    expect(versionToSend('list', NEWEST, 'ignored')).toEqual({ version: null });
    expect(versionToSend('list', '0.11.0', '')).toEqual({ version: '0.11.0' });
  });

  it('sends the typed version under other…, which needs one', () => {
    expect(versionToSend('list', OTHER, ' 0.9.2.post1 ')).toEqual({ version: '0.9.2.post1' });
    expect(versionToSend('list', OTHER, '')).toHaveProperty('error');
    expect(versionToSend('list', OTHER, 'latest')).toEqual({ error: '"latest" is not a plain version number, e.g. 0.33.0.' });
  });

  it('falls back to the text field when the index could not be read: empty sends none', () => {
    expect(versionToSend('typed', NEWEST, '')).toEqual({ version: null });
    expect(versionToSend('typed', '0.11.0', ' 0.12.0rc1')).toEqual({ version: '0.12.0rc1' });
    expect(versionToSend('typed', OTHER, '==0.1')).toHaveProperty('error');
  });

  it('takes what the daemon takes as a plain version', () => {
    for (const v of ['0.33.0', '0.5.3.post1', '0.11.0rc2', '1.0+cu128', '2']) expect(isPlainVersion(v)).toBe(true);
    for (const v of ['', 'v1.0', '1.0 ', '>=1', '1,2', 'latest']) expect(isPlainVersion(v)).toBe(false);
  });
});

describe('the install request', () => {
  it('carries the version and the index only when given', () => {
    expect(installBody('vllm', null, '  ')).toEqual({ kind: 'vllm' });
    expect(installBody('sglang', '0.5.23', ' https://mirror/simple ')).toEqual({
      kind: 'sglang',
      version: '0.5.23',
      index_url: 'https://mirror/simple',
    });
  });

  it('names the engine and the version on the button', () => {
    expect(installLabel('sglang', { version: null })).toBe('Install SGLang (newest release)');
    expect(installLabel('vllm', versionToSend('list', '0.11.0', ''))).toBe('Install vLLM 0.11.0');
    expect(installLabel('vllm', versionToSend('list', OTHER, 'latest'))).toBe('Install vLLM');
  });
});
