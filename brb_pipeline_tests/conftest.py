"""Shared fixtures. Keep this small: each fixture builds real files in tmp dirs. What test modules
share beyond fixtures lives in ``helpers/`` (no test module imports another).

* ``make_chatdb(name="chat.db", **kwargs)`` -> a :class:`ChatDbBuilder` writing
  ``tmp_path/name`` (kwargs: ``legacy``, ``date_unit``, ``wal``, ``bulk``...). Call ``.close()``.
* ``demo_archive_small`` (session scope): a 600-message demo archive with WhatsApp
  (:class:`brb_pipeline.demo.generate.DemoArchive`), built once per test session (~2 s).
  Treat it as read-only: other tests share it.
* ``template_homes`` (session scope): ingested homes built once per session (per variant, under a
  file lock shared by pytest-xdist workers); a test or module takes its own copy
  (:mod:`brb_pipeline_tests.helpers.homes`).

Slow tests carry ``@pytest.mark.slow`` (module-level ``pytestmark``); ``make test-fast`` runs
``-m "not slow"``. Markers are registered in ``pyproject.toml`` and checked (``--strict-markers``).
"""

from __future__ import annotations

import os

import pytest

from brb_pipeline import keys

keys.install()  # the test session is an entry point: encrypted homes' files open with their key

from brb_pipeline.demo.chatdb_writer import ChatDbBuilder

# Homes made by tests (and by the `brb` processes they start, which inherit this) are plaintext
# unless a test asks for encryption (``monkeypatch.setenv("BRB_ENCRYPTION", "1")``): most tests
# read the stores' files directly. The test_encryption*.py files cover encrypted homes.
os.environ["BRB_ENCRYPTION"] = "0"


@pytest.fixture
def make_chatdb(tmp_path):
    def make(name: str = "chat.db", **kwargs) -> ChatDbBuilder:
        return ChatDbBuilder(tmp_path / name, **kwargs)

    return make


@pytest.fixture(scope="session")
def demo_archive_small(tmp_path_factory):
    from brb_pipeline.demo.generate import build_demo_archive

    return build_demo_archive(tmp_path_factory.mktemp("demo_small"), messages=600, seed=7, whatsapp=True)


@pytest.fixture(scope="session")
def template_homes(tmp_path_factory):
    """The session's ingested template homes: ``template_homes.get(name)`` -> (home, archive), built
    on first use (:data:`brb_pipeline_tests.helpers.homes.VARIANTS`). Copy a home before using it
    (``helpers.homes.copy_home``); never change the template or its archive."""
    from brb_pipeline_tests.helpers.homes import Templates, session_root

    return Templates(session_root(tmp_path_factory))
