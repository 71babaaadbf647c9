// Tuning answers for the store and shaping tests: tunings and their trials as the daemon sends
// them (GET /bench/tunes and the `bench.tune` event).

import type { Trial, TuneView } from '../lib/bench/types';
import { stats, T0 } from './bench';

/** A trial that measured these figures, judged as given. */
export function trial(index: number, values: Record<string, string>, figures: number[] | null, extra: Partial<Trial> = {}): Trial {
  return {
    index,
    values,
    outcome: 'measured',
    run_id: 100 + index,
    command_line: `llama-server -m tiny.gguf -ub ${values.ubatch ?? 512}`,
    objective: figures ? stats(figures) : null,
    decision: { verdict: index === 0 ? 'baseline' : 'within_noise', reason: 'within the noise of the best: not a win' },
    error: null,
    started_at_ms: T0 + index * 10_000,
    finished_at_ms: T0 + index * 10_000 + 9_000,
    ...extra,
  };
}

export function tuneView(id: number, extra: Partial<TuneView> = {}): TuneView {
  return {
    id,
    name: `tune ${id}`,
    profile: 'tiny',
    spec: {
      knobs: [{ name: 'ubatch', values: ['64', '128'], range: null }],
      strategy: 'grid',
      objective: 'aggregate_tps',
      bench: { shapes: [{ prompt_tokens: 32, output_tokens: 16 }], depths: [0], concurrency: [1], warm_runs: 3 },
      max_trials: 24,
    },
    status: 'done',
    error: null,
    trials: [trial(0, {}, [40, 41, 42]), trial(1, { ubatch: '64' }, [40, 41, 43]), trial(2, { ubatch: '128' }, [41, 42, 43])],
    trials_planned: 3,
    best: null,
    saved_profile: null,
    started_at_ms: T0 + id * 60_000,
    finished_at_ms: T0 + id * 60_000 + 30_000,
    ...extra,
  };
}
