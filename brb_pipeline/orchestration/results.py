"""What the assets hand to Dagster: results whose metadata is filtered in an encrypted home.

Dagster keeps every materialization's and check's metadata in its event log
(``<home>/dagster/history``, plain SQLite outside the home's key). In an encrypted home only
counts, ratios, timings and flags go there, plus the text of the keys in :data:`SAFE_TEXT`
(settings, model ids, methods, fixed skip reasons, batch keys, timestamps: no message text, no
name, no handle). Everything else textual is dropped: the ``people`` table of who is in which
batch, the cluster labels table, and any text a stage adds later until it is listed here. A
plaintext home keeps its metadata as it is.
"""

from typing import Any

import dagster as dg

from brb_pipeline.keys import provider as keys
from brb_pipeline.config.settings import Settings

#: Text-valued metadata an encrypted home still shows in the Dagster UI (none holds message
#: text or identities: batch keys are ``batch-000``, models ``name@hash``, methods fixed words).
SAFE_TEXT = frozenset({
    "channels", "first_ts", "last_ts", "changed", "batches_processed", "brb_run",
    "reason", "refit_reason", "method", "layout_method", "embedding_model", "embedding_device", "model",
    "model_id", "labeler", "labeler_kind", "languages", "map",
    "param_metric", "param_ignore", "param_stemmer", "param_stopwords",
})


def safe_metadata(s: Settings, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` as it may be stored by Dagster for the home of ``s``: unchanged in a plaintext
    home; in an encrypted one, numbers, flags and :data:`SAFE_TEXT` strings only."""
    if not keys.encrypted(s.home):
        return meta
    return {k: v for k, v in meta.items() if _countable(v) or (k in SAFE_TEXT and isinstance(v, str))}


def _countable(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float))


def materialized(s: Settings, meta: dict[str, Any]) -> dg.MaterializeResult:
    """The asset's result with :func:`safe_metadata`."""
    return dg.MaterializeResult(metadata=safe_metadata(s, meta))


def checked(s: Settings, ok: bool, details: dict[str, Any], severity: dg.AssetCheckSeverity) -> dg.AssetCheckResult:
    """An asset check's result with :func:`safe_metadata`."""
    return dg.AssetCheckResult(passed=ok, severity=severity, metadata=safe_metadata(s, details))
