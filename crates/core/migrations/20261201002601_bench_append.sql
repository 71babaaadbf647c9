-- Benchmarks append what they measure instead of rewriting it (crates/bench/src/store owns the
-- queries): every run of a step gets a row of its own in bench_step_runs (the step's row keeps
-- its point, summary and `"runs": []`, and the digest lists show), and every telemetry point a
-- row in bench_telemetry. What earlier versions stored is moved over unchanged.
ALTER TABLE bench_steps ADD COLUMN digest TEXT NOT NULL DEFAULT '{}';

CREATE TABLE bench_step_runs (
    run_id   INTEGER NOT NULL REFERENCES bench_runs (id) ON DELETE CASCADE,
    step_idx INTEGER NOT NULL,
    idx      INTEGER NOT NULL,
    result   TEXT    NOT NULL,
    PRIMARY KEY (run_id, step_idx, idx)
);

CREATE TABLE bench_telemetry (
    id     INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES bench_runs (id) ON DELETE CASCADE,
    point  TEXT    NOT NULL
);
CREATE INDEX bench_telemetry_run ON bench_telemetry (run_id, id);

INSERT OR IGNORE INTO bench_step_runs (run_id, step_idx, idx, result)
SELECT s.run_id, s.idx, r.key, r.value
FROM bench_steps s,
     json_each(CASE WHEN json_valid(s.result) THEN s.result ELSE '{}' END, '$.runs') r;

UPDATE bench_steps SET result = json_set(result, '$.runs', json('[]')) WHERE json_valid(result);

UPDATE bench_steps SET digest = COALESCE((
    SELECT d.value
    FROM bench_runs r, json_each(CASE WHEN json_valid(r.digest) THEN r.digest ELSE '[]' END) d
    WHERE r.id = bench_steps.run_id AND d.key = bench_steps.idx), '{}');

INSERT INTO bench_telemetry (run_id, point)
SELECT r.id, t.value
FROM bench_runs r, json_each(CASE WHEN json_valid(r.telemetry) THEN r.telemetry ELSE '[]' END) t
ORDER BY r.id, t.key;

ALTER TABLE bench_runs DROP COLUMN telemetry;
ALTER TABLE bench_runs DROP COLUMN digest;
