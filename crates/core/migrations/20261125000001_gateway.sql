-- The gateway's API keys (only a SHA-256 of each secret is kept) and one row per request it
-- served or refused (crates/gateway: keys.rs and usage.rs own the queries).
CREATE TABLE api_keys (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    name          TEXT    NOT NULL,
    prefix        TEXT    NOT NULL,
    hash          TEXT    NOT NULL UNIQUE,
    created_at_ms INTEGER NOT NULL,
    revoked_at_ms INTEGER
);

CREATE TABLE gateway_requests (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms             INTEGER NOT NULL,
    model             TEXT    NOT NULL,
    key_id            INTEGER,
    key_name          TEXT    NOT NULL,
    route             TEXT    NOT NULL,
    stream            INTEGER NOT NULL,
    status            TEXT    NOT NULL,
    http_status       INTEGER NOT NULL,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    cached_tokens     INTEGER,
    ttft_ms           REAL,
    decode_tps        REAL,
    duration_ms       REAL    NOT NULL,
    error             TEXT
);
CREATE INDEX gateway_requests_at ON gateway_requests (at_ms);
CREATE INDEX gateway_requests_key ON gateway_requests (key_id, at_ms);
