-- Tuning runs (crates/bench/src/store/tunes.rs owns the queries): a profile, the knobs and
-- values to try, and every trial as it ends (its knob values, the benchmark run that measured
-- it, how it came out, OOM and crashes included, and the decision against the best so far).
-- Written when the tuning starts and after every trial, so a reload or a daemon that dies
-- loses nothing; one left 'running' by a daemon that stopped is marked 'aborted' at the next start.
CREATE TABLE bench_tunes (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    name           TEXT    NOT NULL,
    profile        TEXT    NOT NULL,
    spec           TEXT    NOT NULL,
    trials         TEXT    NOT NULL DEFAULT '[]',
    best           TEXT,
    saved_profile  TEXT,
    status         TEXT    NOT NULL,
    error          TEXT,
    started_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER
);
