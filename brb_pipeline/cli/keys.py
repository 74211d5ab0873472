"""`brb rekey` and `--no-encryption`: the commands and flag around the home's data key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from brb_pipeline.core.errors import SettingsError

no_encryption_opt = click.option(
    "--no-encryption", is_flag=True,
    help="Make a new home in plaintext (default: AES-256-GCM at rest, key in the OS keychain).")


def encryption_override(no_encryption: bool, home: Path | None, default_home: Callable[[], Path]) -> dict[str, Any]:
    """The settings override of ``--no-encryption``: refused for a home that is already encrypted
    (a home's mode is fixed at its first ingestion)."""
    if not no_encryption:
        return {}
    from brb_pipeline.keys import provider as keys
    from brb_pipeline.config.settings import absolute

    h = absolute(home) if home else default_home()
    if (keys.read_marker(h) or {}).get("encrypted"):
        raise SettingsError(f"{h} is encrypted; --no-encryption applies to a new home only "
                            "(`brb delete-all` first to start a plaintext one)")
    return {"encryption": False}


def rekey_command(home_opt: Callable, settings: Callable[..., Any]) -> click.Command:
    @click.command("rekey")
    @home_opt
    def rekey(home):
        """Rotate the encrypted home's data key: every file is encrypted again under a new key,
        then the old key is destroyed (or finish a rotation that was interrupted)."""
        from brb_pipeline.stages.rekey import rekey as run_rekey

        s = settings(home, write=True)
        r = run_rekey(s)
        how = "finished an interrupted rotation" if r["resumed"] else "rotated the data key"
        click.echo(f"brb: {how}: {r['files']} files re-encrypted; the key is in {r['key_source']}", err=True)

    return rekey
