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


def _our_imports(path: Path) -> set[str]:
    """Dotted ``brb_pipeline`` modules a file imports (``from brb_pipeline.core import x`` -> core.x)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("brb_pipeline"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("brb_pipeline"):
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n.removeprefix("brb_pipeline.") for n in names}


def test_core_imports_no_outer_layer():
    outer = ("sources", "pipeline", "assets", "settings", "runner", "cli", "definitions", "demo")
    offenders = sorted(
        f"{p.relative_to(PKG)} -> {name}"
        for p in (PKG / "core").rglob("*.py")
        for name in _our_imports(p)
        if name.split(".")[0] in outer
    )
    assert offenders == []


def test_sources_import_only_records_and_errors_of_core():
    allowed = ("sources.", "core.errors", "core.records")
    offenders = sorted(
        f"{p.relative_to(PKG)} -> {name}"
        for p in (PKG / "sources").rglob("*.py")
        for name in _our_imports(p)
        if not name.startswith(allowed)
    )
    assert offenders == []


def test_core_is_grouped_by_stage():
    """Each stage subpackage says in its docstring what it owns; no module sits loose beside them
    except the pieces every stage shares."""
    shared = {"__init__", "checks", "chunking", "errors", "faults", "metadata", "progress"}
    loose = {p.stem for p in (PKG / "core").glob("*.py")} - shared
    assert loose == set()
    for pkg in ("contacts", "embedding", "store", "search", "insights", "records", "memory"):
        doc = ast.get_docstring(ast.parse((PKG / "core" / pkg / "__init__.py").read_text()))
        assert doc and len(doc) > 40, pkg


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
