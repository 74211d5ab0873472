"""Find contacts by what a person types: a display name, part of one, a handle or a contact id."""

from __future__ import annotations

from pathlib import Path

from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core import metadata
from brb_pipeline.core.errors import BrbError
from brb_pipeline.core.contacts.routing import fold


def find_contacts(db: Path, names: list[str], *, default_region: str = DEFAULT_REGION) -> list[str]:
    """Contact ids for each of ``names``; one-line errors for no match or an ambiguous one.

    Matching order per name: contact id (any contact, a group chat's ``g:...`` too); an exact
    handle (e-mail or phone, normalized) is the person who has it; the whole display name, then
    a display name containing it as a word prefix ("Ayşe" finds "Ayşe Yılmaz") if unique. Only
    people match by handle or name: a conversation (a group, even one named by its members'
    addresses) is never taken for a person, and an ambiguous name lists people only; a group is
    found by its id, or its whole name when no person matches.
    """
    from brb_pipeline.core.records.handles import normalize_handle  # loads phonenumbers: only for --contact

    rows = metadata.contact_rows(db)
    people = [r for r in rows if r.get("kind") != "group"]
    out: list[str] = []
    for name in names:
        q = name.strip()
        handle = normalize_handle(q, default_region)
        hits = [r["contact_id"] for r in rows if r["contact_id"] == q]
        hits = hits or [r["contact_id"] for r in people if handle and handle in (r.get("handles") or [])]
        hits = hits or _by_name(people, q) or [r["contact_id"] for r in rows if fold(r["display_name"]) == fold(q)]
        if not hits:
            raise BrbError(f"no contact matches {q!r}: see `brb status` or use a handle (+15551234567, a@b.com)")
        if len(hits) > 1:
            shown = ", ".join(sorted(r["display_name"] for r in people if r["contact_id"] in hits)[:5])
            raise BrbError(f"{q!r} matches {len(hits)} people ({shown}...): be more specific or use a handle")
        out.append(hits[0])
    return out


def _by_name(people: list[dict], q: str) -> list[str]:
    """People whose whole display name is ``q``, else whose name has a word starting with it."""
    fq = fold(q)
    hits = [r["contact_id"] for r in people if fold(r["display_name"]) == fq]
    return hits or [r["contact_id"] for r in people
                    if any(w.startswith(fq) for w in fold(r["display_name"]).split()) or fold(r["display_name"]).startswith(fq)]
