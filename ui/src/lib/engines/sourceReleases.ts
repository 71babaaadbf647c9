// The Engines page's "a newer source is available" offer for llama.cpp and ik_llama.cpp: which
// kinds to ask the package index about (those with a build), and what a
// `GET /api/v1/engines/versions` answer offers: the newest release of the package their source
// comes in that is newer than the bundled pin and than every installed build. It builds beside
// the builds already there, which stay until removed.

import type { EngineBuild, EngineVersions, SourceEngineKind } from '../api/types';

export const SOURCE_KINDS: readonly SourceEngineKind[] = ['llama.cpp', 'ik_llama.cpp'];

/** The source kinds that have at least one build, in a fixed order. */
export function kindsWithBuilds(builds: readonly EngineBuild[]): SourceEngineKind[] {
  return SOURCE_KINDS.filter((kind) => builds.some((b) => b.kind === kind));
}

/** What changes the answer: each source build's kind and version. Asking again on the same key
 *  would only repeat the last answer. */
export function releasesKey(builds: readonly EngineBuild[]): string {
  return builds
    .filter((b) => (SOURCE_KINDS as readonly string[]).includes(b.kind))
    .map((b) => `${b.kind}@${b.version}`)
    .sort()
    .join(',');
}

export interface NewerSource {
  kind: SourceEngineKind;
  /** The package on the index (`llama-cpp-python`). */
  package: string;
  /** The newest release newer than the pin and every build. */
  release: string;
  /** The bundled source's version. */
  pinned: string | null;
  /** The releases the installed builds came from, newest first. */
  installed: string[];
}

/** The offer an answer makes: its newest `newer` release, or null when there is none. */
export function newerSource(kind: SourceEngineKind, answer: EngineVersions): NewerSource | null {
  const release = answer.newer[0];
  if (!release) return null;
  return { kind, package: answer.package, release, pinned: answer.pinned, installed: answer.installed };
}

/** "llama-cpp-python 0.3.40 on the package index is newer than the bundled 0.3.36 and your builds
 *  (0.3.36)." */
export function newerSourceText(offer: NewerSource): string {
  const against = [
    offer.pinned ? `the bundled ${offer.pinned}` : null,
    offer.installed.length > 0 ? `your builds (${offer.installed.join(', ')})` : null,
  ].filter((part): part is string => part != null);
  const than = against.length > 0 ? ` is newer than ${against.join(' and ')}` : ' is available';
  return `${offer.kind}: ${offer.package} ${offer.release} on the package index${than}.`;
}
