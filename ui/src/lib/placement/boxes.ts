// Rigs of several boxes in the placement editor: the plan request's rig (a preset or this rig,
// with other boxes lending devices over a link), and how a lent device and its link are named.

import type { AlsoBox, DeviceId, DeviceSpec, LinkCost, LinkOption, RemoteBox, RigRequest } from '../api/types';

/** `live` or a preset id alone, or with the other boxes: `{preset, also}`. */
export function rigRequest(head: string, also: readonly AlsoBox[]): RigRequest {
  return also.length === 0 ? head : { preset: head, also: also.map((b) => ({ ...b })) };
}

/** A box to add: the 2×3090 preset (or the first there is) over 2.5 GbE (or the first link). */
export function newBox(presetIds: readonly string[], links: readonly LinkOption[]): AlsoBox | null {
  const preset = presetIds.includes('2x3090') ? '2x3090' : presetIds[0];
  const link = links.some((l) => l.id === '2.5gbe') ? '2.5gbe' : links[0]?.id;
  return preset && link ? { preset, link } : null;
}

/** The box a lent device is on, from the plan answer's boxes. */
export function lentBox(id: DeviceId, boxes: readonly RemoteBox[] | undefined): RemoteBox | null {
  if (id.kind !== 'rpc') return null;
  return boxes?.find((b) => b.devices.some((d) => d.kind === 'rpc' && d.index === id.index)) ?? null;
}

/** "box 2 · 2x3090 over 2.5 GbE". */
export function boxLabel(b: RemoteBox): string {
  return `${b.name} over ${b.link.name}`;
}

/** The card's own name in a lent device's name ("RPC1 · GPU 1 · RTX 3090 · on box 2 · …" →
 *  "RTX 3090"), or the name as it is when it has no such parts. */
export function lentModelName(spec: DeviceSpec): string {
  const parts = spec.name.split(' · ');
  const on = parts.findIndex((p) => p.startsWith('on '));
  const own = parts.slice(1, on >= 0 ? on : undefined).filter((p) => !/^(GPU \d+|CPU RAM)$/.test(p));
  return own.join(' · ') || spec.name;
}

function gib(bytes: number): string {
  return `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}

/** "box 2 · 2x3090 over 2.5 GbE: 2 crossings a token, 0.41 ms; loading sends 41.2 GiB, 150 s". */
export function linkLine(c: LinkCost): string {
  const perToken = `${c.crossings_per_token} crossing${c.crossings_per_token === 1 ? '' : 's'} a token, ${(c.seconds_per_token * 1000).toFixed(2)} ms`;
  const load = c.load_bytes > 0 ? `; loading sends ${gib(c.load_bytes)}, ${Math.round(c.load_seconds)} s` : '';
  return `${c.box_name} over ${c.link.name}: ${perToken}${load}`;
}
