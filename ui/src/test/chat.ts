// Chat fixtures: messages, conversations and deltas as the daemon sends them.

import type { ChatDelta, ChatMessage, ChatModel, Conversation } from '../lib/api/types';

export const T0 = 1_760_000_000_000;

export function msg(id: number, parent: number | null, role: 'user' | 'assistant' = id % 2 === 1 ? 'user' : 'assistant', extra: Partial<ChatMessage> = {}): ChatMessage {
  return {
    id,
    conversation_id: 1,
    parent_id: parent,
    role,
    content: `m${id}`,
    reasoning: '',
    images: [],
    model: role === 'assistant' ? 'tiny' : null,
    status: 'complete',
    error: null,
    stats: { ttft_ms: null, prompt_tps: null, decode_tps: null, prompt_tokens: null, completion_tokens: null, duration_ms: null },
    created_at_ms: T0 + id * 1000,
    ...extra,
  };
}

export function conversation(extra: Partial<Conversation> = {}): Conversation {
  return { id: 1, title: 'Hello', model: 'tiny', system_prompt: '', params: {}, active_leaf: null, created_at_ms: T0, updated_at_ms: T0, ...extra };
}

export function delta(messageId: number, contentOffset: number, content: string, extra: Partial<ChatDelta> = {}): ChatDelta {
  return {
    conversation_id: 1,
    message_id: messageId,
    content_offset: contentOffset,
    content,
    reasoning_offset: 0,
    reasoning: '',
    completion_tokens: 0,
    elapsed_ms: 0,
    status_line: null,
    ...extra,
  };
}

export function chatModel(name: string, extra: Partial<ChatModel> = {}): ChatModel {
  return { name, aliases: [], state: 'ready', on_demand: false, context: 8192, vision: false, ...extra };
}
