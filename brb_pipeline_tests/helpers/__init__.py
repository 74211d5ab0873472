"""What the test modules share, so that no test module imports another (``test_layout.py`` checks).

* ``cli``: ``brb`` in a subprocess, ``cli`` in this process (click's runner), ``ENV`` / ``CLI_ENV``
  (the deterministic hash embedder), ``status_json``.
* ``homes``: ``copy_home`` and the session's ingested template homes (built once, copied per test).
* ``store``: chunk frames and unit vectors shaped like the chunking and embedding stages' output.
* ``frames``: small normalized message frames.
* ``bytescan``: find strings in every file of a folder, raw and through each format's reader.
* ``forget``: the person a privacy test forgets, and the strings that must vanish with them.
* ``pipeline``: an embedder that counts what it embedded; messages appended to a demo chat.db.
* ``topics``: distilled-memory topic rows for a chunk store.
* ``encrypted_store``: a small chunk store in a fresh (encrypted or plaintext) home.
* ``search_store``: a two-contact store whose vectors sit at opposite poles.
* ``tiny_model``: a random-weight one-layer llama for the mlx-lm labeler.
* ``mcp``: one stdio session with `brb mcp`.
* ``browser``: ``brb ui`` on a test home, headless Chromium, Dagster's GraphQL (browser tests).

``T0``: a fixed tz-aware UTC datetime to build messages around.

Helpers import ``brb_pipeline`` and each other, never a test module or ``conftest``.
"""

from __future__ import annotations

from datetime import UTC, datetime

T0 = datetime(2024, 3, 1, 12, 0, 0, tzinfo=UTC)
