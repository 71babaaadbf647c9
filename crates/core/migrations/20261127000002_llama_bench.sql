-- llama-bench runs (kind 'llama_bench'): llama.cpp's own pp/tg tests at depth with a profile's
-- flags, stored beside serving benchmarks with the same context and telemetry; their results
-- (one entry per test, every repetition's tokens/s) go here.
ALTER TABLE bench_runs ADD COLUMN tests TEXT NOT NULL DEFAULT '[]';
