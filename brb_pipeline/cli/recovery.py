"""What the CLI does about a home a fault left behind (issue 32): a damaged brb.db or
brb.duckdb, a `brb forget` killed half-way, a rerun of a forget that already happened.

Kept out of cli.py so the commands there stay a page each; every helper says what it did in one
line on stderr, or raises a :class:`BrbError` (one line, exit 2).
"""

from __future__ import annotations

import sys

import click

from brb_pipeline.core.errors import BrbError
from brb_pipeline.config.settings import Settings


def check_db(s: Settings) -> None:
    """A damaged brb.db is one line naming it and the way out, before anything reads it."""
    from brb_pipeline.stages.repair import db_damage

    damage = db_damage(s)
    if damage:
        raise BrbError(f"brb.db at {s.brb_db} is damaged ({damage}): run `brb ingest --rebuild` (it keeps the "
                       "forgotten list and the search log where they can be read)")


def rebuild_home(s: Settings, wait: bool) -> None:
    """``brb ingest --rebuild``: a damaged brb.db replaced (forgotten list and search log kept
    where readable), the search store deleted so the ingestion loads it again from staging."""
    from brb_pipeline.stages import repair
    from brb_pipeline.stages.homelock import hold

    with hold(s.home, wait=wait, on_wait=lambda m: click.echo(f"brb: {m}", err=True)):
        damage = repair.db_damage(s)
        if damage:
            r = repair.rebuild_db(s)
            click.echo(f"brb: {s.brb_db} was damaged ({damage}); made a new one keeping "
                       + ", ".join(f"{n:,} {t} rows" for t, n in r["kept"].items())
                       + (f" ({', '.join(r['lost'])} could not be read)" if r["lost"] else ""), err=True)
        repair.prepare_store_rebuild(s)
        click.echo(f"brb: rebuilding {s.duckdb_path} from staging (batches without staged vectors are embedded again)",
                   err=True)


def wipe_events(s: Settings) -> dict[str, int]:
    from brb_pipeline.orchestration.history import wipe_derived_events

    return {"dagster_events_wiped": wipe_derived_events(s)}


def finish_forgets(s: Settings, wait: bool = False) -> list[dict]:
    """Finish a `brb forget` that was killed half-way (see privacy/forget_journal.py). Without
    ``wait`` a home another run holds is left to that run (an ingest finishes it first)."""
    from brb_pipeline.privacy import forget, forget_journal
    from brb_pipeline.stages.homelock import HomeBusyError, hold

    if not forget_journal.pending(s):
        return []
    if "pandas" in sys.modules and sys.modules["pandas"] is None:  # search's stand-in: Dagster needs the real one
        del sys.modules["pandas"]
    try:
        with hold(s.home, what="forget", wait=wait, on_wait=lambda m: click.echo(f"brb: {m}", err=True)):
            done = forget.finish_pending(s, finish=wipe_events)
    except HomeBusyError:
        return []
    if done:
        click.echo(f"brb: finished {len(done)} interrupted forget(s)", err=True)
    return done


def forget_targets(s: Settings, names: list[str], finished: list[dict]) -> tuple[list[str], list[str], int]:
    """(contact ids to forget, handles of people seen only in groups, how many of ``names`` are
    already forgotten): a name or handle of a forget just finished, or a forgotten handle, is not
    an error the second time. A name is looked up among people first
    (:func:`brb_pipeline.core.contacts.people_db.forget_targets`)."""
    from brb_pipeline.core.contacts import people_db
    from brb_pipeline.privacy.forget_journal import was_forgotten

    ids, handles, already = [], [], 0
    for name in names:
        try:
            found, group_only = people_db.forget_targets(s.brb_db, [name], default_region=s.default_region)
        except BrbError:
            if not was_forgotten(s, name, finished, s.default_region):
                raise
            already += 1
            continue
        ids += found
        handles += group_only
    return list(dict.fromkeys(ids)), sorted(set(handles)), already
