-- The gangs this daemon heads while they run: what each has on every rig (its followers, the
-- RPC leases it holds), so a daemon that ended without stopping them (a crash, a kill) finds
-- it at its next start, stops it there and starts the gang again. A row goes when its gang is
-- stopped or has failed for good.
CREATE TABLE gang_runs (
    name TEXT PRIMARY KEY NOT NULL,
    members TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
