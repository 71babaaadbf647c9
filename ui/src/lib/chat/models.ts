// The model picker's reading of /chat/models: whether a model can be chosen and what happens on
// send (a stopped on-demand model loads; a stopped one that is not on demand cannot be used from
// here), the model a conversation names, and the title a new conversation takes from its first
// message.

import type { ChatModel } from '../api/types';
import { NO_CHAT_TEMPLATE } from './template';

export interface ModelChoice {
  model: ChatModel;
  /** Can be picked for a conversation. */
  selectable: boolean;
  /** What the state means for a chat ("ready", "loads on send", why it cannot be chosen). */
  note: string;
  tone: 'ok' | 'warn' | 'bad' | 'info' | 'muted';
}

export function modelChoice(m: ChatModel): ModelChoice {
  switch (m.state) {
    case 'ready':
      return { model: m, selectable: true, note: 'ready', tone: 'ok' };
    case 'loading':
      return { model: m, selectable: true, note: 'loading', tone: 'info' };
    default: {
      const what = m.state === 'crashed' ? 'crashed' : m.state === 'stopping' ? 'stopping' : 'stopped';
      if (m.on_demand) return { model: m, selectable: true, note: `${what}, loads when you send`, tone: 'muted' };
      return {
        model: m,
        selectable: false,
        note: `${what}; not started on request: start it on the Engines page, or turn on "on demand" in its gateway settings`,
        tone: m.state === 'crashed' ? 'bad' : 'muted',
      };
    }
  }
}

/** The model a conversation names (by name or alias), or null when the daemon no longer has it. */
export function findModel(models: readonly ChatModel[] | null, name: string | null): ChatModel | null {
  if (!models || !name) return null;
  return models.find((m) => m.name === name) ?? models.find((m) => m.aliases.includes(name)) ?? null;
}

/** The model a new chat starts with: the last one used when it can still be chosen, else a
 *  ready one, else any that can be chosen. */
export function defaultModel(models: readonly ChatModel[] | null, last: string | null): string | null {
  if (!models || models.length === 0) return null;
  const lastModel = findModel(models, last);
  if (lastModel && modelChoice(lastModel).selectable) return lastModel.name;
  return (models.find((m) => m.state === 'ready') ?? models.find((m) => modelChoice(m).selectable))?.name ?? null;
}

/** What a model without a chat template in its file means, with the fix: null when it has one
 *  (or its profile names one). */
export function templateWarning(m: ChatModel | null): string | null {
  if (!m?.no_chat_template) return null;
  const fix = m.suggested_chat_template
    ? `set its profile's chat template to "${m.suggested_chat_template}" (its architecture's) on the Engines page`
    : "set its profile's chat template on the Engines page";
  return `${NO_CHAT_TEMPLATE}, which this model may not know (stray <|im_end|>, replies that run on). Fix: ${fix}.`;
}

// ---- Titles ----

export const TITLE_CHARS = 60;

/** A new conversation's title: the first line of its first message, cut at a word. */
export function titleFrom(text: string, images = 0): string {
  const line = text.split('\n').map((l) => l.trim()).find((l) => l !== '') ?? '';
  if (line === '') return images > 0 ? 'Image' : 'New chat';
  if (line.length <= TITLE_CHARS) return line;
  const cut = line.slice(0, TITLE_CHARS);
  const space = cut.lastIndexOf(' ');
  return `${(space > TITLE_CHARS / 2 ? cut.slice(0, space) : cut).trimEnd()}…`;
}
