"""Named kill points for crash tests: ``BRB_FAULT=<point>`` makes the process SIGKILL itself there.

The crash harness (``brb_pipeline_tests/test_crash_safety.py``) runs a real ``brb ingest`` with
``BRB_FAULT`` set to each point in :data:`POINTS` and checks what the kill left behind. A point
is a plain function call that costs one dict lookup when the variable is unset, which is always
the case outside that harness. ``<point>@<n>`` kills at the n-th time the point is reached (the
second embedding batch, say), so a kill can land inside a long step rather than only at its ends.
"""

from __future__ import annotations

import os
import signal

#: Every kill point, in pipeline order (the harness kills at each one).
POINTS = (
    "snapshot_copied",      # the sources are copied, nothing parsed yet
    "parsed",               # parsed messages staged, contacts not yet resolved
    "chunks_written",       # one batch's chunks staged, not yet embedded
    "embedding",            # inside embedding, between two model batches (@2: the second)
    "partition_written",    # one batch's embeddings staged, brb.db not yet told
    "load_before_commit",   # rows inserted into the staging copy of the store, not committed
    "load_committed",       # the staging copy holds the new rows, no index yet
    "lines_embedding",      # inside the vector index stage, message lines of one batch of chunks embedded
    "index_built",          # one of the two indexes built in the staging copy
    "published",            # the new store replaced the old one, brb.db not yet told
    "projection",           # PCA/UMAP layout computed, not yet written
    "labels",               # clusters labelled, labels not yet written
    "map_written",          # the map file is written, the run not yet finished
)

#: Kill points of ``brb rekey`` (test_encryption.py kills a rotation at each one).
REKEY_POINTS = (
    "rekey_staged",         # every file copied under the new key, nothing committed yet
    "rekey_swapping",       # committed, one .rekey file renamed over its original (@2: two)
)

#: Kill points of ``brb forget`` (test_faults.py kills a forget at each one; the next command finishes it).
FORGET_POINTS = (
    "forget_journaled",     # the plan is in the journal, nothing removed yet
    "forget_brb_db",        # brb.db no longer lists them, their chunks still staged and stored
    "forget_staging",       # staging filtered, the search store not yet rewritten
    "forget_store",         # the store rewritten, the snapshot, map and search log not yet cleaned
)

_hits: dict[str, int] = {}


def point(name: str) -> None:
    """SIGKILL this process if ``BRB_FAULT`` names this point (and its hit count is reached)."""
    spec = os.environ.get("BRB_FAULT")
    if not spec:
        return
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
