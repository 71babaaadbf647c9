-- Installed engine builds: built by Rigdeck from source, or registered by the user.
-- AUTOINCREMENT: the id of a removed build is never handed to a new one, so a launch profile
-- that still names it fails clearly instead of starting a different engine.
CREATE TABLE engine_builds (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    kind               TEXT    NOT NULL CHECK (kind IN ('llama.cpp', 'ik_llama.cpp', 'vllm', 'sglang')),
    version            TEXT    NOT NULL,
    backend            TEXT    NOT NULL CHECK (backend IN ('cpu', 'cuda', 'vulkan', 'rocm')),
    cuda_architectures TEXT,               -- "86;120" for CUDA builds Rigdeck made
    location           TEXT    NOT NULL UNIQUE, -- the llama-server binary, or the Python environment
    capabilities       TEXT    NOT NULL,   -- JSON: version info, features, every option
    source             TEXT    NOT NULL CHECK (source IN ('built', 'registered')),
    created_at_ms      INTEGER NOT NULL
);
