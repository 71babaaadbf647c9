// Download views for the queue and store tests: one 4 GiB quantization.

import type { DownloadView } from '../lib/api/types';

const GIB = 1024 ** 3;

export function view(id: number, state: string, done = 0, extra: Partial<DownloadView> = {}): DownloadView {
  return {
    id,
    repo: 'unsloth/Qwen3-8B-GGUF',
    revision: 'main',
    label: 'Q4_K_M',
    files: 1,
    state,
    error: null,
    progress: { total_bytes: 4 * GIB, done_bytes: done, files_total: 1, files_done: 0, current: 'Qwen3-8B-Q4_K_M.gguf', rate_bps: 0, eta_s: null },
    paths: [],
    created_ms: 1_763_700_000_000 + id,
    ...extra,
  };
}
