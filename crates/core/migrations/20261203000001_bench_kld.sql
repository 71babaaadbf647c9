-- KL-divergence runs (kind 'kld'): a launch profile measured by llama-perplexity against a
-- recorded reference's logits; their figures (Mean KLD, percentiles, same top token, Δp, the
-- perplexity ratio, with what they were measured on) go here as one JSON object.
ALTER TABLE bench_runs ADD COLUMN kld TEXT NOT NULL DEFAULT 'null';
