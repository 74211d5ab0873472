"""One owner per default (issue 27): every setting's default is declared once, by the section
(the stage's Params class or constant) that uses it, and Settings takes it from there."""

import ast
import dataclasses
from pathlib import Path

from brb_pipeline import core
from brb_pipeline.config.settings import Settings
from brb_pipeline.core.chunk_params import ChunkParams
from brb_pipeline.core.contacts.params import BatchParams
from brb_pipeline.core.embedding import spec
from brb_pipeline.core.insights.params import ClusterParams, ProjectionParams
from brb_pipeline.core.memory import params as memory
from brb_pipeline.core.search.fusion import Fusion
from brb_pipeline.core.store import params as store_params
from brb_pipeline.core.store.params import IndexParams

PKG = Path(__file__).resolve().parent.parent / "brb_pipeline"

#: setting -> (owner, attribute): the inventory of the defaults that a stage owns.
OWNED = {
    "default_region": (core, "DEFAULT_REGION"), "seed": (core, "SEED"),
    "top_contacts": (BatchParams, "top_n"), "top_batch_size": (BatchParams, "top_size"),
    "rest_batch_size": (BatchParams, "rest_size"),
    "conversation_gap_s": (ChunkParams, "gap_s"), "window": (ChunkParams, "window"),
    "stride": (ChunkParams, "stride"), "min_chars": (ChunkParams, "min_chars"),
    "time_zone": (ChunkParams, "time_zone"),
    "embedding_model": (spec, "DEFAULT_MODEL"), "embedding_backend": (spec.EmbedderSpec, "backend"),
    "embedding_device": (spec.EmbedderSpec, "device"), "max_tokens": (spec, "MAX_TOKENS"),
    "token_budget": (spec.EmbedderSpec, "token_budget"),
    "hnsw_m": (IndexParams, "m"), "hnsw_ef_construction": (IndexParams, "ef_construction"),
    "hnsw_ef_search": (IndexParams, "ef_search"), "line_batch_chunks": (store_params, "LINE_BATCH_CHUNKS"),
    "rrf_k": (Fusion, "rrf_k"), "search_fusion": (Fusion, "method"),
    "search_lexical_weight": (Fusion, "lexical_weight"),
    "search_specific_lexical_weight": (Fusion, "specific_lexical_weight"),
    "search_rare_df_share": (Fusion, "rare_df_share"),
    "pca_dim": (ProjectionParams, "pca_dim"), "umap_neighbors": (ProjectionParams, "n_neighbors"),
    "umap_min_dist": (ProjectionParams, "min_dist"), "umap_sample": (ProjectionParams, "sample"),
    "hdbscan_min_cluster_size": (ClusterParams, "min_cluster_size"),
    "hdbscan_min_samples": (ClusterParams, "min_samples"),
    "merge_threshold": (ClusterParams, "merge_threshold"),
    "noise_reassign_threshold": (ClusterParams, "noise_threshold"),
    "llm_max_tokens": (memory, "MAX_TOKENS"), "memory_window_chars": (memory, "WINDOW_CHARS"),
}
#: Settings only the configuration itself uses (sources, switches, operations): declared there.
CONFIG_OWNED = {
    "chat_db", "addressbook_dir", "whatsapp_db", "imessage_enabled", "whatsapp_enabled", "mail_enabled",
    "mail_dir", "attachments_dir", "mail_exclude_lists", "encryption", "duckdb_load_memory_limit",
    "search_min_similarity", "labeler_model_path", "llm_model_path", "insights_refit_share",
    "schedule_cron", "schedule_enabled", "voice_lengths",
}
#: Parameter names under which core functions take those settings (their literal defaults count).
ALIASES = {
    "seed", "default_region", "region", "window", "stride", "gap_s", "min_chars", "time_zone", "model",
    "backend", "device", "max_tokens", "token_budget", "m", "ef_construction", "ef_search", "rrf_k",
    "pca_dim", "n_neighbors", "min_dist", "sample", "min_cluster_size", "min_samples", "merge_threshold",
    "noise_threshold", "top_n", "top_size", "rest_size", "timeout_s", "max_chars",
}
#: Same name, another parameter: (file, name) -> why it is not the setting's default.
NOT_THE_SETTING = {
    ("core/insights/labels/llm.py", "max_tokens"): "a label's length, not a chunk's truncation",
    ("core/insights/labels/llm.py", "max_chars"): "the text of a cluster shown to the labeller",
}


def _setting_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(Settings) if f.name not in ("home", "env_values")}


def test_every_setting_has_one_declared_owner():
    assert set(OWNED) | CONFIG_OWNED == set(_setting_fields())
    assert not set(OWNED) & CONFIG_OWNED


def test_settings_take_each_owned_default_from_its_owner():
    s = Settings(home=Path("/nonexistent"))
    for name, (owner, attr) in OWNED.items():
        assert getattr(s, name) == getattr(owner, attr), name


def _literal_defaults() -> list[tuple[str, int, str, object]]:
    """(file, line, name, value) of every literal default of a function parameter or a class field."""
    out = []
    for p in PKG.rglob("*.py"):
        rel = str(p.relative_to(PKG))
        for node in ast.walk(ast.parse(p.read_text())):
            pairs = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                pos = a.posonlyargs + a.args
                pairs += list(zip(pos[len(pos) - len(a.defaults):], a.defaults))
                pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
                pairs = [(arg.arg, d) for arg, d in pairs]
            elif isinstance(node, ast.ClassDef):
                pairs = [(st.target.id, st.value) for st in node.body
                         if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None]
            for name, d in pairs:
                # None and False are "absent" and "off": every reader defaults to off on its own
                # (privacy: a reader called without a switch never opens more), so they are no
                # value to own.
                if isinstance(d, ast.Constant) and (d.value is None or d.value is False):
                    continue
                if isinstance(d, (ast.Constant, ast.BinOp)):
                    out.append((rel, d.lineno, name, ast.unparse(d)))
    return out


def test_no_setting_is_declared_twice():
    """A literal default for a setting (or the name a core function takes it under) appears once:
    at its owner. Everything else refers to the owner (``seed: int = SEED``)."""
    watched = set(ALIASES) | set(_setting_fields())
    seen: dict[str, list[str]] = {}
    for rel, line, name, value in _literal_defaults():
        if name in watched and (rel, name) not in NOT_THE_SETTING and rel != "config/settings.py":
            seen.setdefault(name, []).append(f"{rel}:{line} = {value}")
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert twice == {}


def test_settings_py_declares_only_what_config_owns():
    """config/settings.py spells a literal only for the settings no stage owns."""
    literal = {name for rel, _, name, _ in _literal_defaults() if rel == "config/settings.py"}
    assert literal & set(OWNED) == set()


def test_the_check_finds_a_second_declaration(tmp_path):
    """The scan is not vacuous: a module that spells ``seed: int = 42`` again is caught."""
    fake = tmp_path / "brb_pipeline"
    (fake / "core").mkdir(parents=True)
    (fake / "core" / "a.py").write_text("def f(seed: int = 42):\n    pass\n")
    (fake / "core" / "b.py").write_text("class P:\n    seed: int = 42\n")
    globals()["PKG"], saved = fake, PKG
    try:
        found = [(r, n) for r, _, n, _ in _literal_defaults() if n == "seed"]
    finally:
        globals()["PKG"] = saved
    assert sorted(found) == [("core/a.py", "seed"), ("core/b.py", "seed")]
