// The Hugging Face cache as the "Downloaded models" panel shows it: what deleting a model or one
// of its snapshots frees (a blob another snapshot links to stays), the list without what was
// deleted, the finished downloads whose files went with it, which revision Verify checks, and
// the texts of a verification and of a deletion.

import type { CacheRemoved, CacheVerification, CachedModel, CachedSnapshot, CheckedFile, DownloadView, HubCacheListing } from '../api/types';
import { formatBytes } from '../format/units';
import { fileCount } from './groups';

/** "0a1b2c3…": a commit as people quote it. */
export function shortCommit(commit: string): string {
  return commit.length > 7 ? `${commit.slice(0, 7)}…` : commit;
}

/** The model of a repository in the listing, or null when it is not downloaded. */
export function cachedModel(listing: HubCacheListing | null, repo: string): CachedModel | null {
  return listing?.models.find((m) => m.repo === repo) ?? null;
}

/** Bytes on disk of some snapshots: each blob once, as the daemon counts. */
export function diskUse(snapshots: CachedSnapshot[]): number {
  const blobs = new Map<string, number>();
  for (const s of snapshots) for (const f of s.files) blobs.set(f.blob, f.size_bytes);
  let total = 0;
  for (const size of blobs.values()) total += size;
  return total;
}

/** What deleting frees: the whole model, or one snapshot's blobs that no other snapshot uses. */
export function freedBy(model: CachedModel, commit?: string | null): number {
  if (!commit) return model.size_on_disk;
  const kept = model.snapshots.filter((s) => s.commit !== commit);
  const inUse = new Set(kept.flatMap((s) => s.files.map((f) => f.blob)));
  const gone = model.snapshots.filter((s) => s.commit === commit);
  const freed = new Map<string, number>();
  for (const s of gone) for (const f of s.files) if (!inUse.has(f.blob)) freed.set(f.blob, f.size_bytes);
  let total = 0;
  for (const size of freed.values()) total += size;
  return total;
}

/** The listing without a deleted model (or snapshot), until the daemon's own list arrives. */
export function withoutRemoved(listing: HubCacheListing, repo: string, commit?: string | null): HubCacheListing {
  const models: CachedModel[] = [];
  for (const m of listing.models) {
    if (m.repo !== repo) {
      models.push(m);
      continue;
    }
    if (!commit) continue;
    const snapshots = m.snapshots.filter((s) => s.commit !== commit);
    if (snapshots.length > 0) models.push({ ...m, snapshots, size_on_disk: diskUse(snapshots) });
  }
  return { ...listing, models };
}

/** Finished downloads whose files were in what was deleted: they would offer Plan on a file that
 *  is gone, and keep the model page saying "downloaded". */
export function downloadsOfRemoved(items: DownloadView[], model: CachedModel, commit?: string | null): number[] {
  const sep = model.dir.includes('\\') && !model.dir.includes('/') ? '\\' : '/';
  const base = model.dir.replace(/[\\/]+$/, '') + sep;
  const under = commit ? `${base}snapshots${sep}${commit}${sep}` : base;
  return items
    .filter((d) => d.state === 'done' && d.repo === model.repo && d.paths.length > 0 && d.paths.every((p) => p.startsWith(under)))
    .map((d) => d.id);
}

/** The revision Verify checks: `main` when a snapshot is on it (the daemon's default, and it says
 *  whether the branch moved on), else a snapshot's branch, else its commit. */
export function verifyRevision(model: CachedModel): string | undefined {
  if (model.snapshots.length === 0 || model.snapshots.some((s) => s.refs.includes('main'))) return undefined;
  const named = model.snapshots.find((s) => s.refs.length > 0);
  return named ? named.refs[0] : model.snapshots[0]!.commit;
}

/** "main · 1 file", or the commit for a snapshot no branch names. */
export function snapshotText(s: CachedSnapshot): string {
  return `${s.refs.length > 0 ? s.refs.join(', ') : shortCommit(s.commit)} · ${fileCount(s.files.length)}`;
}

export interface VerifyOutcome {
  ok: boolean;
  /** "all 3 files match the hub", "1 of 3 files does not match the hub". */
  summary: string;
  bad: CheckedFile[];
  /** "a newer version is on the hub (commit 0a1b2c3…)", or null when the branch is where it was. */
  newer: string | null;
}

export function verifyOutcome(v: CacheVerification): VerifyOutcome {
  const bad = v.files.filter((f) => !f.ok);
  const n = v.files.length;
  let summary: string;
  if (n === 0) summary = 'none of its files is listed on the hub at this commit';
  else if (bad.length === 0) summary = n === 1 ? 'the 1 file matches the hub' : `all ${n} files match the hub`;
  else summary = `${bad.length} of ${n} ${n === 1 ? 'file' : 'files'} ${bad.length === 1 ? 'does' : 'do'} not match the hub`;
  return {
    ok: n > 0 && bad.length === 0,
    summary,
    bad,
    newer: v.upstream_commit && v.upstream_commit !== v.commit ? `a newer version is on the hub (commit ${shortCommit(v.upstream_commit)})` : null,
  };
}

/** The confirmation's question: what goes, and what it frees. */
export function confirmText(model: CachedModel, commit?: string | null): string {
  const freed = formatBytes(freedBy(model, commit));
  if (commit) {
    return `Delete snapshot ${shortCommit(commit)} of ${model.repo}? This frees ${freed}; files another snapshot shares stay.`;
  }
  const files = new Set(model.snapshots.flatMap((s) => s.files.map((f) => f.blob))).size;
  return `Delete ${model.repo} (${fileCount(files)}) from the Hugging Face cache? This frees ${freed}; hf and llama.cpp -hf lose it too.`;
}

/** "Deleted org/name: freed 4.9 GiB", with the blobs kept for another snapshot. */
export function freedText(repo: string, commit: string | null, r: CacheRemoved): string {
  const what = commit ? `snapshot ${shortCommit(commit)} of ${repo}` : repo;
  const kept = r.blobs_kept > 0 ? `; ${fileCount(r.blobs_kept)} kept, another snapshot uses ${r.blobs_kept === 1 ? 'it' : 'them'}` : '';
  return `Deleted ${what}: freed ${formatBytes(r.freed_bytes)}${kept}`;
}

/** Where downloads go, from the settings' folder (null: the cache) and the cache's path. */
export function destinationOf(folder: string | null | undefined, cacheDir: string | null | undefined): { cache: boolean; path: string | null } {
  return folder ? { cache: false, path: folder } : { cache: true, path: cacheDir ?? null };
}
