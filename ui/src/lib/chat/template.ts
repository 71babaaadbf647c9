// A GGUF without `tokenizer.chat_template`: how the library, the plan and the chat name it, in
// one sentence, so all three say the same.

import type { ModelSummary } from '../api/types';

export const NO_CHAT_TEMPLATE = 'This file carries no chat template: llama-server would use ChatML';

/** The file's header was read and has no chat template (unknown, for an older daemon, is not). */
export function lacksChatTemplate(summary: Pick<ModelSummary, 'chat_template'> | null | undefined): boolean {
  return summary != null && summary.chat_template === null;
}

/** The line shown beside such a file, with the architecture's template when one is known. */
export function noTemplateLine(summary: Pick<ModelSummary, 'chat_template' | 'architecture'>, byArchitecture: Record<string, string> = {}): string | null {
  if (!lacksChatTemplate(summary)) return null;
  const own = summary.architecture ? byArchitecture[summary.architecture] : undefined;
  return own
    ? `${NO_CHAT_TEMPLATE}; set the launch profile's chat template to "${own}" (${summary.architecture}'s own).`
    : `${NO_CHAT_TEMPLATE}; set a chat template in its launch profile.`;
}

/** The template a profile form starts with: the profile's own choice; else, for a file without a
 *  template, its architecture's (the user sees it chosen and saves it); else none ('': the file's
 *  own). */
export function presetTemplate(
  chosen: string | null | undefined,
  summary: Pick<ModelSummary, 'chat_template' | 'architecture'> | null | undefined,
  byArchitecture: Record<string, string> = {},
): string {
  if (chosen) return chosen;
  if (!summary || !lacksChatTemplate(summary) || !summary.architecture) return '';
  return byArchitecture[summary.architecture] ?? '';
}
