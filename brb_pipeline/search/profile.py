"""The distilled memory as ``brb profile NAME`` reads it: the person's profile and topics."""

from __future__ import annotations

from typing import Any

from brb_pipeline.core.contacts.lookup import find_contacts
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.search.profiles import contact_topics, read_profile
from brb_pipeline.core.store import duck
from brb_pipeline.search.query import contact_refs, require_store
from brb_pipeline.config.settings import Settings


def run_profile(s: Settings, name: str) -> dict[str, Any]:
    """``{"contact_id", "contact", "profile", "topics"}`` for the contact ``name`` resolves to
    (topics newest first).

    Raises:
        BrbError: no store, no contact matches ``name`` (or several do), or the contact has no
            profile (no local model configured, or not distilled yet).
    """
    require_store(s)
    contact_id = find_contacts(s.brb_db, [name], default_region=s.default_region)[0]
    names = {r.contact_id: r.display_name for r in contact_refs(s)}
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        profile = read_profile(con, contact_id)
        topics = contact_topics(con, contact_id) if profile is not None else []
    finally:
        con.close()
    if profile is None:
        raise BrbError(f"no distilled memory for {name}: set BRB_LLM_MODEL_PATH and run brb ingest")
    return {"contact_id": contact_id, "contact": names.get(contact_id) or contact_id, "profile": profile,
            "topics": topics}
