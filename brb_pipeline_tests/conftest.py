"""Shared fixtures. Keep this small: each fixture builds real SQLite files in tmp dirs.

* ``make_chatdb(name="chat.db", **kwargs)`` -> a :class:`ChatDbBuilder` writing
  ``tmp_path/name`` (kwargs: ``legacy``, ``date_unit``, ``wal``, ``bulk``...). Call ``.close()``.
* ``T0``: a fixed tz-aware UTC datetime to build messages around.
* ``demo_archive_small`` (session scope): a 600-message demo archive with WhatsApp
  (:class:`brb_pipeline.demo.generate.DemoArchive`), built once per test session (~2 s).
  Treat it as read-only: other tests share it.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

from brb_pipeline import keys

keys.install()  # the test session is an entry point: encrypted homes' files open with their key

from brb_pipeline.demo.chatdb_writer import ChatDbBuilder

T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)

# Homes made by tests (and by the `brb` processes they start, which inherit this) are plaintext
# unless a test asks for encryption (``monkeypatch.setenv("BRB_ENCRYPTION", "1")``): most tests
# read the stores' files directly. The test_encryption*.py files cover encrypted homes.
os.environ["BRB_ENCRYPTION"] = "0"


# Whole modules that take minutes: the kill -9 harness, the fault suite, the browser, the
# end-to-end benchmark's own test. `make test` runs them; `make test-fast` leaves them out.
SLOW_MODULES = frozenset({"test_crash_safety.py", "test_faults.py", "test_ui_browser.py", "test_bench_e2e.py"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def make_chatdb(tmp_path):
    def make(name: str = "chat.db", **kwargs) -> ChatDbBuilder:
        return ChatDbBuilder(tmp_path / name, **kwargs)

    return make


@pytest.fixture(scope="session")
def demo_archive_small(tmp_path_factory):
    from brb_pipeline.demo.generate import build_demo_archive

    return build_demo_archive(tmp_path_factory.mktemp("demo_small"), messages=600, seed=7, whatsapp=True)

