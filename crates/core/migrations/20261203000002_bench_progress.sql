-- How far a run that reports its own progress is (a KL-divergence run: windows done of all, as
-- llama-perplexity prints them), as {"done": k, "total": n}; the run's list entry counts it.
ALTER TABLE bench_runs ADD COLUMN progress TEXT NOT NULL DEFAULT 'null';
