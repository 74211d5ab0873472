"""Test helper: copy an ingested home so each test can change (or kill) its own."""

from __future__ import annotations

import shutil
from pathlib import Path


def copy_home(template: Path, dst: Path) -> Path:
    """Copy ``template`` to ``dst``, pointing the copy's Dagster instance at its own storage
    (``dagster.yaml`` names its base_dir absolutely)."""
    shutil.copytree(template, dst)
    cfg = dst / "dagster" / "dagster.yaml"
    cfg.write_text(cfg.read_text().replace(str(template), str(dst)))
    return dst
