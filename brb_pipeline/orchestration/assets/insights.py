"""Unpartitioned analyzing assets: projection -> clusters -> cluster_labels -> insights_map."""


import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from brb_pipeline.orchestration.automation import EAGER
from brb_pipeline.orchestration.assets.groups import INSIGHTS
from brb_pipeline.orchestration.resources import BrbSettings, Runtime
from brb_pipeline.orchestration.results import materialized
from brb_pipeline.orchestration.assets.store import text_index, vector_index
from brb_pipeline.stages import insights


def _run(context: dg.AssetExecutionContext, rt: Runtime, stage: Callable[..., dict[str, Any]], *args: Any,
         **kwargs: Any) -> dict[str, Any]:
    """``stage`` (a ``stages.insights.run_*``) with the run's progress, between cancel checks."""
    rt.cancel.check()
    meta = stage(*args, progress=rt.progress_for(context), **kwargs)
    rt.cancel.check()
    return meta


class LayoutConfig(dg.Config):
    """``refit``: refit the layout (and recluster) even when a small change could be placed."""

    refit: bool = False


@dg.asset(group_name=INSIGHTS, deps=[vector_index, text_index], kinds={"sklearn", "umap"}, automation_condition=EAGER)
def projection(context: dg.AssetExecutionContext, config: LayoutConfig, brb: BrbSettings,
               runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """PCA (embedding dim -> 50) then UMAP to 2-D and 3-D, seeded; a small change is placed instead."""
    s = brb.load()
    return materialized(s, _run(context, runtime, insights.run_projection, s, refit=config.refit))


@dg.asset(group_name=INSIGHTS, deps=[projection], kinds={"hdbscan"}, automation_condition=EAGER)
def clusters(context: dg.AssetExecutionContext, config: LayoutConfig, brb: BrbSettings,
             runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """HDBSCAN on the 2-D layout (similar clusters merged, close noise reassigned, ids stable), or
    the neighbours' cluster for placed chunks."""
    s = brb.load()
    return materialized(s, _run(context, runtime, insights.run_clusters, s, refit=config.refit))


@dg.asset(group_name=INSIGHTS, deps=[clusters], kinds={"sklearn"}, automation_condition=EAGER)
def cluster_labels(context: dg.AssetExecutionContext, brb: BrbSettings,
                   runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """A short readable label per cluster (c-TF-IDF re-ranked by the embedding model, or mlx-lm
    with a local model)."""
    s = brb.load()
    return materialized(s, _run(context, runtime, insights.run_labels, s, embedder=runtime.embedder(s)))


@dg.asset(group_name=INSIGHTS, deps=[cluster_labels], kinds={"plotly"}, automation_condition=EAGER)
def insights_map(context: dg.AssetExecutionContext, brb: BrbSettings,
                 runtime: dg.ResourceParam[Runtime]) -> dg.MaterializeResult:
    """The interactive conversation map (2-D and 3-D HTML) and its PNG preview (an encrypted home
    keeps neither: ``brb insights --open`` draws them when opened)."""
    s = brb.load()
    meta = _run(context, runtime, insights.run_map, s)
    meta["clusters_table"] = dg.MetadataValue.md(meta.pop("summary_markdown"))
    if "html" in meta:
        png = Path(meta["png"])
        preview = ""
        if png.exists() and png.stat().st_size < 2_000_000:
            preview = f"![map](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()})"
        meta.update(html=dg.MetadataValue.path(meta["html"]), preview=dg.MetadataValue.md(preview or "(no preview)"))
    return materialized(s, meta)
