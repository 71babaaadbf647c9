-- Whether a benchmark run's exact_prompts is known yet: a run is created before its engine's
-- tokenizer is asked, and until then it is neither exact nor estimated. Earlier runs were asked.
ALTER TABLE bench_runs ADD COLUMN prompts_known INTEGER NOT NULL DEFAULT 1;
