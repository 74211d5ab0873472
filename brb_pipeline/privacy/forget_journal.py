"""The forget journal: a `brb forget` is written down before it removes anything, so one that
was killed half-way is finished by the next command.

:func:`~brb_pipeline.privacy.forget.forget_contacts` writes its plan (who, their handles and
names, their batches, chats and chunk ids) as one row of ``forget_journal`` in brb.db and
commits it before the first removal; each step after it can run again to the same end; the row
is deleted once every step is done (and brb.db vacuumed, so it leaves no bytes). A row left
behind is a forget that did not finish: :func:`brb_pipeline.privacy.forget.finish_pending` carries it out again from the
start. `brb forget`, `brb ingest` (and every run through ``runner.run_ingest``), `brb status`
and `brb search` call it first.

The row names the people being forgotten for as long as brb.db still holds them elsewhere,
never after.
"""

from __future__ import annotations

import json
import time
from typing import Any

from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core import metadata
from brb_pipeline.config.settings import Settings

JOURNAL_DDL = """CREATE TABLE IF NOT EXISTS forget_journal (
    id INTEGER PRIMARY KEY,
    started_at REAL NOT NULL,
    plan_json TEXT NOT NULL    -- privacy.plan_forget's plan; deleted when the forget is done
)"""


def begin(s: Settings, plan: dict[str, Any]) -> int:
    """Write the intent (committed before anything is removed). Returns the entry's id."""
    with metadata.connect(s.brb_db) as c:
        c.execute(JOURNAL_DDL)
        return int(c.execute("INSERT INTO forget_journal (started_at, plan_json) VALUES (?, ?)",
                             (time.time(), json.dumps(plan))).lastrowid)


def end(s: Settings, entry: int) -> None:
    """The forget is done: its entry goes (zeroed on delete; the caller vacuums brb.db)."""
    with metadata.connect(s.brb_db) as c:
        c.execute("PRAGMA secure_delete = ON")
        c.execute(JOURNAL_DDL)
        c.execute("DELETE FROM forget_journal WHERE id = ?", (entry,))


def pending(s: Settings) -> list[tuple[int, dict[str, Any]]]:
    """Forgets that were started and not finished, oldest first."""
    if not s.brb_db.exists():
        return []
    with metadata.open_db(s.brb_db) as c:  # read only: no schema set-up on every search
        if not c.execute("SELECT 1 FROM sqlite_master WHERE name = 'forget_journal'").fetchone():
            return []
        rows = c.execute("SELECT id, plan_json FROM forget_journal ORDER BY id").fetchall()
    return [(int(i), json.loads(p)) for i, p in rows]


def was_forgotten(s: Settings, query: str, finished: list[dict[str, Any]], default_region: str = DEFAULT_REGION) -> bool:
    """Whether ``query`` (a name or handle given to `brb forget`) names someone already forgotten:
    a name or handle of a forget just finished, or a handle on the forgotten list."""
    from brb_pipeline.core.contacts.lookup import fold
    from brb_pipeline.core.records.handles import normalize_handle
    from brb_pipeline.privacy.forgotten import forgotten_rules

    q = query.strip()
    handle = normalize_handle(q, default_region)
    for plan in finished:
        if q in plan["contact_ids"] or (handle and handle in plan["handles"]):
            return True
        if any(fold(n) == fold(q) or any(w.startswith(fold(q)) for w in fold(n).split()) for n in plan["names"]):
            return True
    rules = forgotten_rules(s) if handle else None
    return bool(rules is not None and rules.is_handle(handle))
