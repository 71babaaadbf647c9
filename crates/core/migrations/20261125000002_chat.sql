-- Chat conversations and their messages (crates/chat/src/store.rs owns the queries). Messages
-- form a tree (parent_id): an edit or a regeneration is a sibling, a branch the user can flip
-- to; active_leaf is the branch shown. A reply being written is saved as it grows (status
-- 'streaming'); one left so by a daemon that died is marked 'interrupted' at the next start.
CREATE TABLE chat_conversations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT    NOT NULL,
    model         TEXT    NOT NULL,
    system_prompt TEXT    NOT NULL DEFAULT '',
    params        TEXT    NOT NULL DEFAULT '{}',
    active_leaf   INTEGER,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE chat_messages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES chat_conversations (id) ON DELETE CASCADE,
    parent_id       INTEGER REFERENCES chat_messages (id) ON DELETE CASCADE,
    role            TEXT    NOT NULL,
    content         TEXT    NOT NULL DEFAULT '',
    reasoning       TEXT    NOT NULL DEFAULT '',
    images          TEXT    NOT NULL DEFAULT '[]',
    model           TEXT,
    status          TEXT    NOT NULL,
    error           TEXT,
    stats           TEXT    NOT NULL DEFAULT '{}',
    created_at_ms   INTEGER NOT NULL
);
CREATE INDEX chat_messages_conversation ON chat_messages (conversation_id, id);
