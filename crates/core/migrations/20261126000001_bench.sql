-- Benchmark runs (crates/bench/src/store.rs owns the queries): serving benchmarks (steps in
-- bench_steps) and quality probes (graded answers in `answers`). A run row is written when the
-- benchmark starts (status 'running') and each step is saved after every one of its runs, so
-- what was measured survives a failure, a cancel or a daemon that dies; one left 'running' by
-- a daemon that stopped is marked 'aborted' at the next start.
CREATE TABLE bench_runs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    target         TEXT    NOT NULL,
    spec           TEXT    NOT NULL,
    context        TEXT    NOT NULL DEFAULT '{}',
    telemetry      TEXT    NOT NULL DEFAULT '[]',
    digest         TEXT    NOT NULL DEFAULT '[]',
    answers        TEXT    NOT NULL DEFAULT '[]',
    status         TEXT    NOT NULL,
    error          TEXT,
    exact_prompts  INTEGER NOT NULL DEFAULT 0,
    started_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER
);

CREATE TABLE bench_steps (
    run_id INTEGER NOT NULL REFERENCES bench_runs (id) ON DELETE CASCADE,
    idx    INTEGER NOT NULL,
    result TEXT    NOT NULL,
    PRIMARY KEY (run_id, idx)
);
