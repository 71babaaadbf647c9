-- Model downloads from the hub: the queue survives a restart (running and queued jobs resume).
-- The body is the request as JSON (crates/core/src/downloads/mod.rs, DownloadRequest): the
-- repository, revision, commit, quantization label and the files with their sizes and hashes.
CREATE TABLE downloads (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    body          TEXT    NOT NULL,
    state         TEXT    NOT NULL,
    error         TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
