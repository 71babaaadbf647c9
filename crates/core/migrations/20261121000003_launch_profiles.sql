-- Launch profiles: how to start one engine (build, model, placement, network, environment …).
-- The body is the profile as JSON (crates/core/src/launch/profile.rs, LaunchProfile), so new
-- optional fields need no migration; the name is also a column so it stays unique.
CREATE TABLE launch_profiles (
    name          TEXT    PRIMARY KEY NOT NULL,
    body          TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
