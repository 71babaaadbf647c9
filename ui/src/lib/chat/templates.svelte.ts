// The chat templates llama-server knows and each architecture's own (GET /chat/templates), read
// once per page load: the library, the plan and the profile form name them.

import { api } from '../api/client';
import type { ChatTemplates } from '../api/types';

export const chatTemplates = $state<{ data: ChatTemplates | null }>({ data: null });

let asked = false;

/** Reads the list the first time it is needed; a failure leaves it empty (the lines then name
 *  no template, and the profile form offers none). */
export function loadChatTemplates(): void {
  if (asked) return;
  asked = true;
  api
    .chatTemplates()
    .then((t) => (chatTemplates.data = t))
    .catch(() => (asked = false));
}
