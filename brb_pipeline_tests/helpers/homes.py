"""Ingested homes for tests: built once per test session as templates, copied per test or module.

An ingest costs seconds to a minute (the demo archive, every stage, the UMAP JIT in a new
process); a copy costs milliseconds. :class:`Templates` (the ``template_homes`` fixture of
``conftest.py``) builds each variant of :data:`VARIANTS` the first time a test asks for it, under a
file lock in a folder that every pytest-xdist worker of the session shares, so a variant is built
once per session whichever worker asks first. Tests never change a template: they take a copy
(:func:`copy_home`), which points its Dagster instance at itself.

The archive a template was ingested from is shared too (a home's settings name its sources):
tests read it, and copy it before they change it.
"""

from __future__ import annotations

import os
import pickle
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from brb_pipeline.demo.generate import DemoArchive, build_demo_archive
from brb_pipeline_tests.helpers.cli import ENV, brb


def copy_home(template: Path, dst: Path) -> Path:
    """Copy ``template`` to ``dst``, pointing the copy's Dagster instance at its own storage
    (``dagster.yaml`` names its base_dir absolutely)."""
    shutil.copytree(template, dst)
    cfg = dst / "dagster" / "dagster.yaml"
    cfg.write_text(cfg.read_text().replace(str(template), str(dst)))
    return dst


@dataclass(frozen=True)
class Variant:
    """A demo archive (``build_demo_archive`` arguments) and how ``brb ingest`` read it."""

    messages: int
    seed: int
    whatsapp: bool = False
    mail: bool = False
    attachments: bool = False
    insights: bool = True
    encrypted: bool = False
    ingest_args: tuple[str, ...] = field(default=())

    def archive(self, dest: Path) -> DemoArchive:
        return build_demo_archive(dest, messages=self.messages, seed=self.seed, whatsapp=self.whatsapp,
                                  mail=self.mail)

    def args(self, archive: DemoArchive) -> list[str]:
        args = ["--chat-db", str(archive.chat_db), "--addressbook", str(archive.addressbook_dir)]
        if self.whatsapp:
            args += ["--whatsapp", str(archive.whatsapp_db)]
        if self.mail:
            args += ["--mail", str(archive.mail_dir)]
        if self.attachments:
            args += ["--attachments", str(archive.attachments_dir)]
        if not self.insights:
            args.append("--no-insights")
        return [*args, "--progress", "none", *self.ingest_args]


#: Every template home of the suite. Keep this list short: a variant is an ingest per session.
#: Encrypted variants keep their key in the template's key folder (:meth:`Templates.key_dir`),
#: which a test copies with the home.
VARIANTS: dict[str, Variant] = {
    # 700 iMessage messages with insights: the command line, forget and its byte scans
    "imessage-700": Variant(messages=700, seed=21),
    # the same archive with WhatsApp and Mail, plaintext and encrypted: encryption at rest, MCP
    "all-700": Variant(messages=700, seed=21, whatsapp=True, mail=True),
    "all-700-enc": Variant(messages=700, seed=21, whatsapp=True, mail=True, encrypted=True),
}


class Templates:
    """The session's template homes, built on first use (see the module's docstring)."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def key_dir(self, name: str) -> Path:
        return self.root / f"{name}.keys"

    def get(self, name: str) -> tuple[Path, DemoArchive]:
        """(template home, its archive) of variant ``name``, built if no worker built it yet."""
        variant = VARIANTS[name]
        home, archive_pickle = self.root / name, self.root / f"{name}.archive.pickle"
        with FileLock(str(self.root / f"{name}.lock")):
            if not archive_pickle.exists():
                for stale in (home, self.root / f"{name}.archive", self.key_dir(name)):
                    shutil.rmtree(stale, ignore_errors=True)
                archive = variant.archive(self.root / f"{name}.archive")
                env = {**ENV, "BRB_KEY_DIR": str(self.key_dir(name)), "BRB_ENCRYPTION": str(int(variant.encrypted))}
                env.pop("BRB_KEY", None)
                r = brb("ingest", *variant.args(archive), home=home, env=env, timeout=900)
                assert r.returncode == 0, r.stderr[-3000:]
                archive_pickle.write_bytes(pickle.dumps(archive))
            return home, pickle.loads(archive_pickle.read_bytes())

    def copy(self, name: str, dst: Path, key_dir: Path | None = None) -> tuple[Path, DemoArchive]:
        """A copy of variant ``name``'s home at ``dst`` (and of its key folder at ``key_dir``, for an
        encrypted variant), and the variant's archive."""
        home, archive = self.get(name)
        copy_home(home, dst)
        if key_dir is not None and self.key_dir(name).exists():
            shutil.copytree(self.key_dir(name), key_dir, dirs_exist_ok=True)
        return dst, archive


def session_root(tmp_path_factory) -> Path:
    """A folder shared by every pytest-xdist worker of this session (the workers' base temp
    folders are siblings under the session's own), or this process's base temp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "template-homes"
