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


def test_only_orchestration_imports_dagster():
    """Dagster is the orchestration layer's: stages, search, privacy and the rest are plain Python
    (the command line imports orchestration lazily, for the commands that run the graph)."""
    offenders = sorted(
        str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
        if "dagster" in _imports(p) and p.relative_to(PKG).parts[0] not in ("orchestration", "cli")
    )
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


#: What each package may import of the others: a layering (a package sees only those below it).
#: ``core`` is pure (no settings, no dagster); ``config`` is settings and file locations; ``keys``
#: installs the key provider at entry points; ``privacy`` sits below ``stages`` because ingestion
#: applies the forgotten list and scrubs the snapshot; ``orchestration`` wraps ``stages``.
LAYERS = {
    "core": set(),
    "sources": {"core"},
    "demo": {"core", "sources"},
    "config": {"core"},
    "keys": {"core", "config"},
    "privacy": {"core", "sources", "config", "keys"},
    "stages": {"core", "sources", "config", "keys", "privacy"},
    "search": {"core", "config", "keys"},
    "assistant": {"core", "config", "keys", "search"},
    "orchestration": {"core", "sources", "config", "keys", "privacy", "stages"},
    "cli": {"core", "sources", "demo", "config", "keys", "privacy", "stages", "search", "assistant",
            "orchestration"},
}


def _package(name: str) -> str:
    return name.split(".")[0]


def test_every_package_is_declared_with_its_rule():
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS)
    loose = {p.stem for p in PKG.glob("*.py")} - {"__init__"}
    assert loose == set(), "every module belongs to a package"
    for pkg in LAYERS:
        doc = ast.get_docstring(ast.parse((PKG / pkg / "__init__.py").read_text()))
        assert doc and "Must not" in doc, f"{pkg}/__init__.py says what it owns and must not import"


def test_each_package_imports_only_the_layers_below_it():
    offenders = sorted(
        f"{p.relative_to(PKG)} -> {name}"
        for pkg, allowed in LAYERS.items()
        for p in (PKG / pkg).rglob("*.py")
        for name in _our_imports(p)
        if _package(name) in LAYERS and _package(name) not in allowed | {pkg}
    )
    assert offenders == []


def _module_graph() -> dict[str, set[str]]:
    mods = {".".join(p.relative_to(PKG).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PKG.rglob("*.py")}
    graph = {}
    for m, p in mods.items():
        deps = set()
        for name in _our_imports(p):
            while name and name not in mods:  # `from pkg.mod import func` -> pkg.mod
                name = name.rpartition(".")[0]
            if name and name != m:
                deps.add(name)
        graph[m] = deps
    return graph


def test_no_import_circle_between_modules():
    """Counting imports inside functions too: a lazy import that closes a circle is still one."""
    graph = _module_graph()
    state: dict[str, int] = {}
    circles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                circles.append(" -> ".join(path[path.index(d):] + [d]) if d in path else d)
            elif d not in state:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert circles == []


def test_core_imports_no_outer_layer():
    outer = set(LAYERS) - {"core"}
    offenders = sorted(
        f"{p.relative_to(PKG)} -> {name}"
        for p in (PKG / "core").rglob("*.py")
        for name in _our_imports(p)
        if _package(name) in outer
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
    shared = {"__init__", "checks", "chunking", "chunk_params", "errors", "faults", "metadata", "progress"}
    loose = {p.stem for p in (PKG / "core").glob("*.py")} - shared
    assert loose == set()
    for pkg in ("contacts", "embedding", "store", "search", "insights", "records", "memory"):
        doc = ast.get_docstring(ast.parse((PKG / "core" / pkg / "__init__.py").read_text()))
        assert doc and len(doc) > 40, pkg


def test_definitions_load_and_every_job_resolves():
    from brb_pipeline.orchestration.definitions import defs

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
    from brb_pipeline.orchestration.definitions import defs

    graph = defs.resolve_asset_graph()
    for name in ("batch_chunks", "batch_embeddings"):
        pd = graph.get(dg.AssetKey(name)).partitions_def
        assert isinstance(pd, dg.DynamicPartitionsDefinition) and pd.name == "contact_batches"
    assert graph.get(dg.AssetKey("chunk_store")).partitions_def is None


def test_every_benchmark_script_installs_the_key_provider():
    """A benchmark run as a script is an entry point like `brb`: without ``keys.install()`` the
    first read of a home's files raises (core.crypto never installs a provider on import)."""
    missing = []
    for path in sorted((PKG.parent / "benchmarks").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        is_script = '__name__ == "__main__"' in text or "sys.argv" in text
        if is_script and "brb_pipeline" in text and "keys.install()" not in text:
            missing.append(path.name)
    assert not missing, missing
