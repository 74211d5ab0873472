"""Architecture contracts: readers and core logic never import dagster; the Definitions load."""

import ast
from pathlib import Path

import dagster as dg

PKG = Path(__file__).resolve().parent.parent / "brb_pipeline"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_sources_core_and_pipeline_never_import_dagster():
    offenders = [
        str(p.relative_to(PKG))
        for sub in ("sources", "core", "pipeline")
        for p in (PKG / sub).rglob("*.py")
        if "dagster" in _imports(p)
    ]
    assert offenders == []


def test_definitions_load_and_every_job_resolves():
    from brb_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"source_snapshot", "parsed_messages", "contacts", "contact_batches", "batch_chunks",
            "batch_embeddings", "chunk_store", "vector_index", "text_index", "projection", "clusters",
            "cluster_labels", "insights_map"} <= keys
    for job in ("ingest_job", "batch_job", "finalize_job"):
        assert defs.resolve_job_def(job).name == job
    # lineage reads snapshot -> ... -> cluster labels
    assert graph.get(dg.AssetKey("cluster_labels")).parent_keys == {dg.AssetKey("clusters")}
    assert dg.AssetKey("source_snapshot") in graph.get(dg.AssetKey("parsed_messages")).parent_keys


def test_per_batch_assets_use_the_contact_batch_partitions():
    from brb_pipeline.definitions import defs

    graph = defs.resolve_asset_graph()
    for name in ("batch_chunks", "batch_embeddings"):
        pd = graph.get(dg.AssetKey(name)).partitions_def
        assert isinstance(pd, dg.DynamicPartitionsDefinition) and pd.name == "contact_batches"
    assert graph.get(dg.AssetKey("chunk_store")).partitions_def is None
