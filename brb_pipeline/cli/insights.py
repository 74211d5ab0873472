"""`brb insights`: print or open the conversation map (drawn when opened in an encrypted home)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from brb_pipeline.core.errors import BrbError

#: How long a temporary map stays when no terminal can say when it has been seen (seconds).
MAP_LINGER_S = 30.0


def insights_command(home_opt: Callable, settings: Callable[..., Any]) -> click.Command:
    """The ``insights`` command, with the CLI's ``--home`` option and settings loader."""

    @click.command("insights")
    @click.option("--open", "open_", is_flag=True, help="Open the map in a browser.")
    @click.option("--refit", is_flag=True,
                  help="Redraw the map now with a full PCA -> UMAP -> HDBSCAN refit (ingests only place small "
                       "changes).")
    @click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Draw the map into this folder and keep it there (outside an encrypted home).")
    @click.option("--wait", type=float, default=None,
                  help="Encrypted home: seconds the map drawn into a temporary folder stays before it is "
                       f"deleted (default: until Enter; {MAP_LINGER_S:.0f} s without a terminal).")
    @home_opt
    def insights(open_, refit, keep, wait, home):
        """Print (or open) the path of the interactive conversation map.

        An encrypted home keeps no map file (its hover texts quote messages): the map is drawn
        into a private temporary folder outside the home, shown, and deleted when you press Enter.
        """
        from brb_pipeline.keys import provider as keys
        from brb_pipeline.stages.insights import private_map, render_map, run_insights

        s = settings(home)
        if refit:
            res = run_insights(s, refit=True)
            took = sum(float(m.get("seconds", 0)) for m in res.values())
            click.echo(f"brb: map refitted: {res['projection']['chunks']:,} chunks, "
                       f"{res['insights_map']['clusters']} clusters in {took:.0f} s", err=True)
        if keep is not None:
            _show(render_map(s, keep).html, open_)
        elif keys.encrypted(s.home):
            with private_map(s) as drawn:
                _show(drawn.html, open_)
                _linger(wait, drawn.html.parent)
            click.echo(f"brb: {drawn.html.parent} deleted", err=True)
        else:
            m = s.insights_dir / "map.html"
            if not m.exists():
                raise BrbError(f"no insights map in {s.insights_dir}: run `brb ingest` (or `brb demo`) first")
            _show(m, open_)

    return insights


def _show(m: Path, open_: bool) -> None:
    """Open ``m`` in a browser when asked; print its path (the last line of the output)."""
    if open_:
        import webbrowser

        webbrowser.open(m.as_uri())
    click.echo(str(m))


def _linger(wait: float | None, folder: Path) -> None:
    """Keep the temporary map until Enter (on a terminal) or for ``wait`` seconds."""
    if wait is None and sys.stdin.isatty():
        click.echo(f"brb: press Enter to delete {folder} (the map quotes your messages)", err=True)
        sys.stdin.readline()
    else:
        time.sleep(MAP_LINGER_S if wait is None else max(0.0, wait))
