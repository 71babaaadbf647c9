-- Telemetry history, downsampled: one row per GPU (or the host) per bucket (10 s averages).
CREATE TABLE gpu_history (
    gpu_key            TEXT    NOT NULL,  -- NVML UUID, or "index:N" when the GPU had none
    bucket_ms          INTEGER NOT NULL,  -- bucket start, ms since the Unix epoch
    gpu_index          INTEGER NOT NULL,
    name               TEXT,
    memory_total_bytes INTEGER,
    utilization_pct    REAL,
    memory_used_bytes  REAL,
    temperature_mc     REAL,
    power_mw           REAL,
    samples            INTEGER NOT NULL,
    PRIMARY KEY (gpu_key, bucket_ms)
) WITHOUT ROWID;

CREATE INDEX gpu_history_by_time ON gpu_history (bucket_ms);

CREATE TABLE host_history (
    bucket_ms         INTEGER PRIMARY KEY,
    cpu_usage_pct     REAL    NOT NULL,
    memory_used_bytes REAL    NOT NULL,
    swap_used_bytes   REAL    NOT NULL,
    samples           INTEGER NOT NULL
);
