// What the dashboard's "Work" panel shows: the models running (their gateway names, state, memory
// per GPU and the speed of their last reply), the downloads under way, and, when there is neither,
// the next step for this rig (find a model, or run one of those on disk).

import type { DownloadView, GatewayLastReply, GatewayModel, InstanceView } from '../api/types';
import { memoryRows, phaseLabel, phaseTone, type MemoryRow, type Tone } from '../engines/instances';
import { formatTokensPerSecond } from '../format/speed';
import { progressPct, stateLabel as downloadStateLabel } from '../hub/queue';

/** Where the next-step links lead. */
export const WELCOME_HASH = '#/welcome';
export const MODELS_HASH = '#/models';
export const ENGINES_HASH = '#/instances';
export const CHAT_HASH = '#/chat';

export interface WorkModel {
  /** The profile's name: what the gateway and the chat call it. */
  name: string;
  /** Other names the gateway answers to. */
  aliases: string[];
  phase: string;
  /** "loading 40%", "ready", "crashed". */
  stateText: string;
  tone: Tone;
  /** Load progress, 0..1, while loading and known. */
  progress: number | null;
  /** Planned and measured memory per GPU. */
  memory: MemoryRow[];
  /** "45.2 tok/s", or null before its first reply. */
  lastReply: string | null;
  /** Ready: the chat can talk to it now. */
  chattable: boolean;
}

export interface WorkDownload {
  id: number;
  /** "org/model · Q4_K_M". */
  title: string;
  /** "downloading 42 %", "queued", "paused". */
  stateText: string;
  /** 0..100 once the size is known. */
  pct: number | null;
}

export interface NextStep {
  kind: 'find' | 'run';
  text: string;
  href: string;
}

export interface RigWork {
  models: WorkModel[];
  downloads: WorkDownload[];
  /** Shown only when nothing runs and nothing downloads. */
  next: NextStep | null;
}

export interface WorkInput {
  instances: InstanceView[];
  /** The gateway's models (GET /gateway); null before the first answer. */
  gateway: GatewayModel[] | null;
  downloads: DownloadView[];
  /** Models in the library; null before the list arrived. */
  libraryCount: number | null;
  /** Launch profiles; null before the list arrived. */
  profileCount: number | null;
}

/** The phases an instance is shown in: under way, or crashed (with its cause on the Engines page). */
const SHOWN_PHASES = new Set(['starting', 'loading', 'ready', 'stopping', 'crashed']);
const UNDER_WAY = new Set(['queued', 'running', 'paused']);

/** The last reply's decode speed ("45.2 tok/s"), or null before there is one. */
export function lastReplyText(reply: GatewayLastReply | null | undefined): string | null {
  if (!reply || !Number.isFinite(reply.decode_tps) || reply.decode_tps <= 0) return null;
  return formatTokensPerSecond(reply.decode_tps);
}

function workModel(v: InstanceView, gateway: GatewayModel | undefined): WorkModel {
  const progress = v.phase === 'loading' && typeof v.progress === 'number' && Number.isFinite(v.progress) ? Math.min(1, Math.max(0, v.progress)) : null;
  return {
    name: v.name,
    aliases: gateway?.aliases ?? [],
    phase: v.phase,
    stateText: phaseLabel(v),
    tone: phaseTone(v.phase),
    progress,
    memory: memoryRows(v),
    lastReply: lastReplyText(gateway?.last_reply),
    chattable: v.phase === 'ready',
  };
}

function workDownload(d: DownloadView): WorkDownload {
  return { id: d.id, title: `${d.repo} · ${d.label}`, stateText: downloadStateLabel(d), pct: progressPct(d.progress) };
}

/** With nothing running or downloading: find a model when there is none, else run one. Null
 *  until the library and the profiles are known (no advice from half the facts). */
export function nextStep(libraryCount: number | null, profileCount: number | null): NextStep | null {
  if (libraryCount == null || profileCount == null) return null;
  if (libraryCount === 0 && profileCount === 0) {
    return { kind: 'find', text: 'Find a model that fits this rig', href: WELCOME_HASH };
  }
  return { kind: 'run', text: 'No model is running: run one', href: MODELS_HASH };
}

export function rigWork(input: WorkInput): RigWork {
  const byName = new Map((input.gateway ?? []).map((m) => [m.name, m]));
  const models = input.instances
    .filter((v) => SHOWN_PHASES.has(v.phase))
    .map((v) => workModel(v, byName.get(v.name)))
    .sort((a, b) => a.name.localeCompare(b.name));
  const downloads = input.downloads.filter((d) => UNDER_WAY.has(d.state)).map(workDownload);
  const idle = models.length === 0 && downloads.length === 0;
  return { models, downloads, next: idle ? nextStep(input.libraryCount, input.profileCount) : null };
}
