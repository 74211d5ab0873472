"""An embedder that counts what it embedded, and new messages appended to a demo chat.db."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.core.store import duck
from brb_pipeline.demo.chatdb_writer import _register_trigger_functions, apple_time


class CountingEmbedder(HashEmbedder):
    """HashEmbedder that records what it embedded (the labels' candidate terms go through it too)."""

    def __init__(self):
        super().__init__(dim=64)
        self.calls = 0
        self.texts = 0
        self.seen: list[str] = []

    def embed(self, texts):
        self.calls += 1
        self.texts += len(texts)
        self.seen.extend(texts)
        return super().embed(texts)

    def chunk_texts(self, s) -> int:
        """How many embedded texts were chunk texts of the store."""
        con = duck.connect(s.duckdb_path, read_only=True)
        try:
            stored = {t for (t,) in con.execute("SELECT embedding_text FROM chunks").fetchall()}
        finally:
            con.close()
        return sum(t in stored for t in self.seen)


def append_messages(chat_db, chat_guid, texts, start):
    """Append messages to an existing chat in a demo chat.db (as Messages would)."""
    con = sqlite3.connect(chat_db)
    _register_trigger_functions(con)
    chat_rowid, = con.execute("SELECT ROWID FROM chat WHERE guid = ?", (chat_guid,)).fetchone()
    handle_id, = con.execute("SELECT handle_id FROM chat_handle_join WHERE chat_id = ? LIMIT 1", (chat_rowid,)).fetchone()
    for i, text in enumerate(texts):
        ts = apple_time(start + timedelta(minutes=i))
        cur = con.execute(
            "INSERT INTO message (guid, text, handle_id, date, is_from_me, service) VALUES (?, ?, ?, ?, ?, 'iMessage')",
            (f"APPENDED-{chat_guid}-{i}", text, handle_id, ts, i % 2))
        con.execute("INSERT INTO chat_message_join (chat_id, message_id, message_date) VALUES (?, ?, ?)",
                    (chat_rowid, cur.lastrowid, ts))
    con.commit()
    con.close()
