"""`brb people`: everyone in your conversations (1:1 and groups), with their stats."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click


def people_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``brb people --json``: counts, then one entry per person, most messages first."""
    people = []
    for r in rows:
        convs = r["conversations"]
        people.append({
            "person_id": r["person_id"], "name": r["display_name"], "named": r["name_source"] == "addressbook",
            "nickname": r.get("nickname"), "handles": r["handles"], "channels": r["channels"],
            "messages": r["messages"], "sent": r["sent"], "received": r["received"],
            "group_messages": r["group_messages"], "first_ts": r["first_ts"], "last_ts": r["last_ts"],
            "avg_response_s_me": r["avg_response_s_me"], "avg_response_s_them": r["avg_response_s_them"],
            "reactions_sent": r.get("reactions_sent") or 0, "reactions_received": r.get("reactions_received") or 0,
            "reactions": r.get("reactions") or {},
            "conversations": len(convs), "groups": sum(c["kind"] == "group" for c in convs),
            "conversation_ids": [c["contact_id"] for c in convs],
            "left_groups": sorted({c["contact_id"] for c in convs if c["kind"] == "group" and c.get("left_ts")}),
        })
    return {"people": len(people), "named_people": sum(p["named"] for p in people),
            "group_only_people": sum(p["conversations"] == p["groups"] for p in people), "list": people}


def people_lines(report: dict[str, Any]) -> list[str]:
    """The text ``brb people`` prints: one line per person."""
    lines = [f"{report['people']} people ({report['named_people']} named, "
             f"{report['group_only_people']} only in groups)"]
    for p in report["list"]:
        days = f"{(p['first_ts'] or '')[:10]} .. {(p['last_ts'] or '')[:10]}"
        top = " ".join(f"{k}×{n}" for k, n in list(p["reactions"].items())[:3])
        taps = f"  tapbacks {p['reactions_sent']:,} given ({top}) / {p['reactions_received']:,} got" \
            if p["reactions_sent"] or p["reactions_received"] else ""
        lines.append(f"{p['name']:<28} {p['messages']:>7,} msgs ({p['group_messages']:,} in groups)  "
                     f"sent {p['sent']:,} / received {p['received']:,}  {p['conversations']} conv "
                     f"({p['groups']} groups)  {','.join(p['channels'])}  {days}{taps}")
    return lines


def period(value: str | None) -> tuple[Any, Any]:
    """``2024``, ``2024-05`` or ``2024-05-17`` -> ``[start, end)`` in UTC; (None, None) for None.

    Raises:
        click.BadParameter: anything else.
    """
    from datetime import datetime, timezone

    if not value:
        return None, None
    v = value.strip()
    try:
        parts = [int(x) for x in v.split("-")]
        if not 1 <= len(parts) <= 3 or len(str(parts[0])) != 4:
            raise ValueError
        start = datetime(parts[0], parts[1] if len(parts) > 1 else 1, parts[2] if len(parts) > 2 else 1,
                         tzinfo=timezone.utc)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a year, month or day like 2024, 2024-05 or 2024-05-17",
                                 param_hint="--during") from None
    if len(parts) == 1:
        return start, start.replace(year=start.year + 1)
    if len(parts) == 2:
        return start, start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    from datetime import timedelta

    return start, start + timedelta(days=1)


def group_report(s: Any, name: str, during: str | None) -> dict[str, Any]:
    """``brb people --group NAME [--during PERIOD]``: who was in that group (then)."""
    from brb_pipeline.core.contacts import people_db
    from brb_pipeline.core.contacts.lookup import find_contacts
    from brb_pipeline.core.errors import BrbError

    since, until = period(during)
    cid = find_contacts(s.brb_db, [name], default_region=s.default_region)[0]
    if not cid.startswith("g:"):
        raise BrbError(f"{name.strip()!r} is a person, not a group chat: give a group's name (see `brb status`)")
    members = people_db.group_members(s.brb_db, cid, since, until)
    return {"group": cid, "during": during, "since": since, "until": until, "members": len(members),
            "list": members}


def group_lines(report: dict[str, Any]) -> list[str]:
    """The text ``brb people --group`` prints."""
    when = f" during {report['during']}" if report["during"] else ""
    lines = [f"{report['members']} people in the group{when}"]
    for m in report["list"]:
        joined = f"joined {m['joined_ts'][:10]}" if m["joined_ts"] else "there from the start"
        left = f", left {m['left_ts'][:10]}" if m["left_ts"] else ""
        lines.append(f"{m['name']:<28} {joined}{left}")
    return lines


def people_command(home_opt: Callable, settings: Callable[..., Any]) -> click.Command:
    """The ``people`` command, with the CLI's ``--home`` option and settings loader."""

    @click.command("people")
    @click.option("--group", "group", default=None,
                  help="Only the people in this group chat (its name); with --during, those in it then.")
    @click.option("--during", default=None, help="With --group: a year, month or day (2024, 2024-05, 2024-05-17).")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.option("--partitions", is_flag=True,
                  help="Each person's Dagster partitions (batch keys) and the conversations they hold.")
    @click.option("--find", "find", default=None, metavar="NAME",
                  help="Only the people NAME names (a name, part of one, a handle), as `--contact` reads it.")
    @home_opt
    def people(group, during, as_json, partitions, find, home):
        """Everyone in your conversations, 1:1 and groups: messages each way (how many in groups),
        first/last date, reply times, tapbacks given and got, channels and conversations.
        With --group: who was in that group chat (added, removed and left read from its events).

        --partitions finds a person's partitions for the Dagster UI (an encrypted home keeps
        names out of Dagster's storage): resolved here, printed only."""
        from brb_pipeline.core.contacts import people_db
        from brb_pipeline.core.errors import BrbError

        s = settings(home)
        if not s.brb_db.exists():
            raise BrbError(f"nothing stored in {s.home}: run `brb ingest` (or `brb demo`) first")
        if not people_db.has_people(s.brb_db):
            raise BrbError(f"no people in {s.home} yet (a store made by an older brb): run `brb ingest`")
        if during and not group:
            raise BrbError("--during needs --group NAME")
        if group:
            g = group_report(s, group, during)
            click.echo(json.dumps(g, indent=2, ensure_ascii=False, default=str) if as_json
                       else "\n".join(group_lines(g)))
            return
        if partitions or find is not None:
            _print_partitions(s, find, as_json)
            return
        report = people_report(people_db.people_rows(s.brb_db))
        if as_json:
            click.echo(json.dumps(report, indent=2, ensure_ascii=False, default=str))
            return
        click.echo("\n".join(people_lines(report)))

    return people


def _print_partitions(s: Any, find: str | None, as_json: bool) -> None:
    """``brb people --partitions [--find NAME]``: name -> partition keys, to the terminal only."""
    from brb_pipeline.core.contacts.partitions import partition_lines, person_partitions
    from brb_pipeline.core.errors import BrbError

    found = person_partitions(s.brb_db, find, default_region=s.default_region)
    if find is not None and not found:
        raise BrbError(f"no person matches {find.strip()!r}: see `brb people` or use a handle")
    if as_json:
        click.echo(json.dumps({"people": found}, indent=2, ensure_ascii=False))
        return
    click.echo("\n".join(partition_lines(found)))
