-- Engine builds may now come with the package ('packaged'): the source CHECK is widened. SQLite
-- cannot alter a CHECK, so the table is rebuilt with its rows, ids and AUTOINCREMENT counter.
CREATE TABLE engine_builds_new (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    kind               TEXT    NOT NULL CHECK (kind IN ('llama.cpp', 'ik_llama.cpp', 'vllm', 'sglang')),
    version            TEXT    NOT NULL,
    backend            TEXT    NOT NULL CHECK (backend IN ('cpu', 'cuda', 'vulkan', 'rocm')),
    cuda_architectures TEXT,
    location           TEXT    NOT NULL UNIQUE,
    capabilities       TEXT    NOT NULL,
    source             TEXT    NOT NULL CHECK (source IN ('built', 'registered', 'packaged')),
    created_at_ms      INTEGER NOT NULL
);
INSERT INTO engine_builds_new (id, kind, version, backend, cuda_architectures, location, capabilities, source, created_at_ms)
    SELECT id, kind, version, backend, cuda_architectures, location, capabilities, source, created_at_ms FROM engine_builds;
-- A removed build's id is never handed out again, even when it was the highest.
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'engine_builds_new', seq FROM sqlite_sequence WHERE name = 'engine_builds'
    AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'engine_builds_new');
UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'engine_builds'), 0))
    WHERE name = 'engine_builds_new';
DROP TABLE engine_builds;
ALTER TABLE engine_builds_new RENAME TO engine_builds;
