-- The fleet: the peers whose certificates this daemon pinned, and the one-time join codes it
-- handed out (only the secret's SHA-256 is kept).
CREATE TABLE fleet_peers (
    name TEXT NOT NULL PRIMARY KEY,
    -- SHA-256 of the peer's certificate, upper-case hex pairs.
    fingerprint TEXT NOT NULL UNIQUE,
    -- What the peer is to this daemon: 'rig' (this daemon joined it) or 'desk' (it joined this one).
    role TEXT NOT NULL CHECK (role IN ('rig', 'desk')),
    -- HOST:PORT of its fleet listener as this daemon dials it; NULL when it has none.
    address TEXT,
    paired_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    last_answer_at_ms INTEGER,
    -- Since when it has not answered (NULL while it answers, or before the first try).
    silent_since_ms INTEGER,
    last_problem TEXT
);

CREATE TABLE fleet_invites (
    id INTEGER PRIMARY KEY,
    secret_sha256 BLOB NOT NULL,
    address TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    used_at_ms INTEGER,
    -- The name of the desk that used it.
    used_by TEXT
);
