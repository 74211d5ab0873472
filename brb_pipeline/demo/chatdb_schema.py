"""Apple's ``chat.db`` schema: the DDL Messages ships, an older column set, and the facts its
triggers and ``chat.style`` values carry. :mod:`brb_pipeline.demo.chatdb_writer` writes files with it.
"""

from __future__ import annotations

from pathlib import Path

SCHEMA_PATH = Path(__file__).parent / "schemas" / "chat.db.sql"

# Functions Apple's triggers call; Messages registers them on its own connections.
TRIGGER_FUNCTIONS: dict[str, int] = {
    "delete_attachment_path": 1,
    "before_delete_attachment_path": 2,
    "after_delete_message_plugin": 2,
}

# A pre-Ventura style message table: no attributedBody-era columns (date_edited, date_retracted,
# associated_message_emoji, thread_originator_guid...). Used to test tolerance of old column sets.
LEGACY_DDL = """
CREATE TABLE message (ROWID INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT UNIQUE NOT NULL,
  text TEXT, replace INTEGER DEFAULT 0, handle_id INTEGER DEFAULT 0, subject TEXT,
  service TEXT, date INTEGER, date_read INTEGER, date_delivered INTEGER,
  is_from_me INTEGER DEFAULT 0, is_system_message INTEGER DEFAULT 0,
  is_service_message INTEGER DEFAULT 0, cache_has_attachments INTEGER DEFAULT 0,
  item_type INTEGER DEFAULT 0, group_action_type INTEGER DEFAULT 0,
  associated_message_guid TEXT, associated_message_type INTEGER DEFAULT 0);
CREATE TABLE handle (ROWID INTEGER PRIMARY KEY AUTOINCREMENT UNIQUE, id TEXT NOT NULL,
  country TEXT, service TEXT NOT NULL, uncanonicalized_id TEXT, UNIQUE (id, service));
CREATE TABLE chat (ROWID INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT UNIQUE NOT NULL,
  style INTEGER, state INTEGER, chat_identifier TEXT, service_name TEXT, room_name TEXT,
  display_name TEXT);
CREATE TABLE chat_handle_join (chat_id INTEGER, handle_id INTEGER, UNIQUE(chat_id, handle_id));
CREATE TABLE chat_message_join (chat_id INTEGER, message_id INTEGER,
  PRIMARY KEY (chat_id, message_id));
CREATE TABLE attachment (ROWID INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT UNIQUE NOT NULL,
  filename TEXT, mime_type TEXT, transfer_name TEXT, total_bytes INTEGER DEFAULT 0);
CREATE TABLE message_attachment_join (message_id INTEGER, attachment_id INTEGER,
  UNIQUE(message_id, attachment_id));
"""

STYLE_GROUP = 43
STYLE_DIRECT = 45


def apple_ddl(part: str = "all") -> str:
    """Apple's chat.db DDL minus ``sqlite_sequence`` (SQLite creates that one itself).

    Args:
        part: ``"all"``, ``"tables"`` (CREATE TABLE only) or ``"rest"`` (indexes and triggers).
    """
    stmts = [s for s in SCHEMA_PATH.read_text().split(";\n\n") if s.strip()]
    keep = [s for s in stmts if "CREATE TABLE sqlite_sequence" not in s]
    if part != "all":
        tables = [s for s in keep if s.lstrip().startswith("CREATE TABLE")]
        keep = tables if part == "tables" else [s for s in keep if s not in tables]
    return ";\n\n".join(keep) + ";\n"
