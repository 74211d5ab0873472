"""`brb profile NAME`: a person's distilled memory (profile, then topics newest first)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click


def profile_lines(out: dict[str, Any]) -> list[str]:
    """:func:`brb_pipeline.search.profile.run_profile`'s dict as the text ``brb profile`` prints."""
    p = out["profile"]
    lines = [out["contact"],
             f"relationship    {p['relationship'] or '-'}",
             f"tone            {p['tone'] or '-'}",
             f"recurring       {', '.join(p['recurring_topics']) or '-'}",
             "commitments" + ("" if p["commitments"] else "     none")]
    lines += [f"  - {c['text']}" + (f" ({c['date']})" if c["date"] else "") for c in p["commitments"]]
    lines.append(f"topics          {len(out['topics'])} (newest first)")
    for t in out["topics"]:
        span = f"{(t['first_ts'] or '')[:16]} .. {(t['last_ts'] or '')[:16]}"
        lines.append(f"  {t['month'] or '-'}  {t['label'] or ''}  [{span}, chat {t['chat_id']}]")
        if t["summary"]:
            lines.append(f"    {t['summary']}")
    return lines


def profile_command(home_opt: Callable, settings: Callable[..., Any]) -> click.Command:
    """The ``profile`` command, with the CLI's ``--home`` option and settings loader."""

    @click.command("profile")
    @click.argument("name")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @home_opt
    def profile(name, as_json, home):
        """A person's profile (relationship, tone, recurring topics, commitments) and their topics,
        from the distilled memory (needs a local model: BRB_LLM_MODEL_PATH)."""
        from brb_pipeline.search.profile import run_profile

        out = run_profile(settings(home), name)
        if as_json:
            click.echo(json.dumps(out, indent=2, ensure_ascii=False, default=str))
            return
        click.echo("\n".join(profile_lines(out)))

    return profile
