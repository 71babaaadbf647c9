// The cache's housekeeping: a blob shared by snapshots counts once and stays while another
// snapshot uses it; the downloads whose files went; the revision Verify checks; the texts.

import { describe, expect, it } from 'vitest';
import type { CachedModel, HubCacheListing } from '../api/types';
import { view } from '../../test/downloads';
import {
  cachedModel,
  confirmText,
  destinationOf,
  diskUse,
  downloadsOfRemoved,
  freedBy,
  freedText,
  shortCommit,
  snapshotText,
  verifyOutcome,
  verifyRevision,
  withoutRemoved,
} from './housekeeping';

const GIB = 1024 ** 3;
const OLD = 'a'.repeat(40);
const NEW = 'b'.repeat(40);
const DIR = '/hf/hub/models--unsloth--Qwen3-8B-GGUF';

/** Two snapshots sharing the README; the weights changed between them. */
const model: CachedModel = {
  repo: 'unsloth/Qwen3-8B-GGUF',
  dir: DIR,
  snapshots: [
    {
      commit: OLD,
      refs: [],
      files: [
        { path: 'README.md', blob: 'r1', size_bytes: 1000 },
        { path: 'Qwen3-8B-Q4_K_M.gguf', blob: 'w1', size_bytes: 5 * GIB },
      ],
    },
    {
      commit: NEW,
      refs: ['main'],
      files: [
        { path: 'README.md', blob: 'r1', size_bytes: 1000 },
        { path: 'Qwen3-8B-Q4_K_M.gguf', blob: 'w2', size_bytes: 4 * GIB },
      ],
    },
  ],
  size_on_disk: 9 * GIB + 1000,
};
const other: CachedModel = { repo: 'org/other', dir: '/hf/hub/models--org--other', snapshots: [{ commit: NEW, refs: ['main'], files: [{ path: 'x.gguf', blob: 'x', size_bytes: 10 }] }], size_on_disk: 10 };
const listing: HubCacheListing = { cache_dir: '/hf/hub', models: [other, model] };

describe('disk use and what a deletion frees', () => {
  it('counts a blob shared by snapshots once', () => {
    expect(diskUse(model.snapshots)).toBe(model.size_on_disk);
    expect(diskUse([])).toBe(0);
  });

  it('frees the whole model, or only the blobs no other snapshot uses', () => {
    expect(freedBy(model)).toBe(9 * GIB + 1000);
    expect(freedBy(model, null)).toBe(9 * GIB + 1000);
    // The README stays for the other snapshot.
    expect(freedBy(model, OLD)).toBe(5 * GIB);
    expect(freedBy(model, NEW)).toBe(4 * GIB);
    expect(freedBy(model, 'c'.repeat(40))).toBe(0);
  });

  it('finds a repository in the listing', () => {
    expect(cachedModel(listing, 'org/other')).toBe(other);
    expect(cachedModel(listing, 'org/none')).toBeNull();
    expect(cachedModel(null, 'org/other')).toBeNull();
  });

  it('drops a deleted model, or one snapshot with the size recounted', () => {
    expect(withoutRemoved(listing, model.repo).models.map((m) => m.repo)).toEqual(['org/other']);
    const left = withoutRemoved(listing, model.repo, OLD);
    expect(left.cache_dir).toBe('/hf/hub');
    const m = cachedModel(left, model.repo)!;
    expect(m.snapshots.map((s) => s.commit)).toEqual([NEW]);
    expect(m.size_on_disk).toBe(4 * GIB + 1000);
    // The last snapshot takes the model with it.
    expect(cachedModel(withoutRemoved(listing, 'org/other', NEW), 'org/other')).toBeNull();
    expect(listing.models).toHaveLength(2);
  });
});

describe('the downloads whose files were deleted', () => {
  const done = (id: number, commit: string, extra = {}) =>
    view(id, 'done', 4 * GIB, { paths: [`${DIR}/snapshots/${commit}/Qwen3-8B-Q4_K_M.gguf`], ...extra });

  it('are the finished ones under the model, or under the snapshot deleted', () => {
    const items = [
      done(1, OLD),
      done(2, NEW),
      view(3, 'running', GIB),
      done(4, NEW, { repo: 'org/other' }),
      // In a plain download folder: not in the cache.
      view(5, 'done', 4 * GIB, { paths: ['/data/downloads/Qwen3-8B-Q4_K_M.gguf'] }),
      // Finished before a restart, no paths known.
      view(6, 'done', 4 * GIB),
    ];
    expect(downloadsOfRemoved(items, model)).toEqual([1, 2]);
    expect(downloadsOfRemoved(items, model, OLD)).toEqual([1]);
    expect(downloadsOfRemoved(items, model, NEW)).toEqual([2]);
  });

  it('do not match a model whose name starts the same', () => {
    const longer = view(7, 'done', 1, { paths: [`${DIR}-Instruct/snapshots/${NEW}/x.gguf`] });
    expect(downloadsOfRemoved([longer], model)).toEqual([]);
  });
});

describe('Verify', () => {
  it('checks main when a snapshot is on it, else a branch, else the commit', () => {
    expect(verifyRevision(model)).toBeUndefined();
    const onPr = { ...model, snapshots: [{ ...model.snapshots[0]!, refs: ['refs/pr/1'] }] };
    expect(verifyRevision(onPr)).toBe('refs/pr/1');
    const bare = { ...model, snapshots: [model.snapshots[0]!] };
    expect(verifyRevision(bare)).toBe(OLD);
  });

  it('says all files match, or which do not and why', () => {
    const ok = verifyOutcome({ commit: NEW, files: [{ path: 'a', ok: true, problem: null }, { path: 'b', ok: true, problem: null }], upstream_commit: null });
    expect(ok).toEqual({ ok: true, summary: 'all 2 files match the hub', bad: [], newer: null });
    expect(verifyOutcome({ commit: NEW, files: [{ path: 'a', ok: true, problem: null }], upstream_commit: null }).summary).toBe('the 1 file matches the hub');
    const bad = verifyOutcome({
      commit: NEW,
      files: [
        { path: 'a', ok: true, problem: null },
        { path: 'b.gguf', ok: false, problem: 'hashes to 12, the hub says 34: download it again' },
      ],
      upstream_commit: null,
    });
    expect(bad.ok).toBe(false);
    expect(bad.summary).toBe('1 of 2 files does not match the hub');
    expect(bad.bad.map((f) => f.path)).toEqual(['b.gguf']);
    expect(verifyOutcome({ commit: NEW, files: [], upstream_commit: null })).toMatchObject({ ok: false, summary: 'none of its files is listed on the hub at this commit' });
  });

  it('says when the hub has a newer version', () => {
    const moved = verifyOutcome({ commit: OLD, files: [{ path: 'a', ok: true, problem: null }], upstream_commit: 'abc1234def'.padEnd(40, '0') });
    expect(moved.ok).toBe(true);
    expect(moved.newer).toBe('a newer version is on the hub (commit abc1234…)');
  });
});

describe('texts', () => {
  it('quotes commits short and names snapshots by their branch', () => {
    expect(shortCommit('0123456789abcdef')).toBe('0123456…');
    expect(shortCommit('abc')).toBe('abc');
    expect(snapshotText(model.snapshots[1]!)).toBe('main · 2 files');
    expect(snapshotText(other.snapshots[0]!)).toBe('main · 1 file');
    expect(snapshotText(model.snapshots[0]!)).toBe('aaaaaaa… · 2 files');
  });

  it('asks with the size a deletion frees', () => {
    expect(confirmText(model)).toBe('Delete unsloth/Qwen3-8B-GGUF (3 files) from the Hugging Face cache? This frees 9.0 GiB; hf and llama.cpp -hf lose it too.');
    expect(confirmText(model, OLD)).toBe('Delete snapshot aaaaaaa… of unsloth/Qwen3-8B-GGUF? This frees 5.0 GiB; files another snapshot shares stay.');
  });

  it('says what was freed, and what another snapshot kept', () => {
    expect(freedText('org/m', null, { freed_bytes: 4 * GIB, blobs_removed: 2, blobs_kept: 0 })).toBe('Deleted org/m: freed 4.0 GiB');
    expect(freedText('org/m', OLD, { freed_bytes: 5 * GIB, blobs_removed: 1, blobs_kept: 1 })).toBe(
      'Deleted snapshot aaaaaaa… of org/m: freed 5.0 GiB; 1 file kept, another snapshot uses it',
    );
  });

  it('says where downloads go', () => {
    expect(destinationOf(null, '/hf/hub')).toEqual({ cache: true, path: '/hf/hub' });
    expect(destinationOf(null, undefined)).toEqual({ cache: true, path: null });
    expect(destinationOf('/data/downloads', '/hf/hub')).toEqual({ cache: false, path: '/data/downloads' });
  });
});
