-- The planner's closed loop: each llama.cpp dry run and each engine measured after load, per
-- device, next to the estimate made for it (before any correction). Corrections of the compute
-- and overhead terms per (architecture, backend, device model) are read back from these rows.
CREATE TABLE plan_observations (
    id INTEGER PRIMARY KEY,
    -- One row per dry run (model, flags, build, device) or per engine run and GPU: asking again
    -- updates the row instead of adding weight to one answer.
    dedupe_key TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL CHECK (source IN ('dry_run', 'measured')),
    architecture TEXT NOT NULL,
    backend TEXT NOT NULL,
    device_model TEXT NOT NULL,
    model TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    estimated_weights_bytes INTEGER NOT NULL,
    estimated_kv_bytes INTEGER NOT NULL,
    estimated_compute_bytes INTEGER NOT NULL,
    estimated_overhead_bytes INTEGER NOT NULL,
    -- A dry run gives each term; a measured engine only its total.
    observed_weights_bytes INTEGER,
    observed_kv_bytes INTEGER,
    observed_compute_bytes INTEGER,
    observed_total_bytes INTEGER NOT NULL
);
CREATE INDEX plan_observations_by_key ON plan_observations (architecture, backend, device_model, at_ms);
