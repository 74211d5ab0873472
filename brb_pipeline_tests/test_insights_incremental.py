"""Incremental insights: a small change is placed into the previous layout, a large one refits.

The store is a real DuckDB file built from real partition files: four topics of 60 chunks (one
contact and batch each) around random centres, plus a small extra batch in topic 1 to remove.
One full fit is made per module; each test works on a copy of that home.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from brb_pipeline.cli.app import main
from brb_pipeline.core.store import duck
from brb_pipeline.core.store import chunks as store
from brb_pipeline.core.insights.clustering import vote_by_neighbours
from brb_pipeline.core.insights.projection import (
    embedding_fingerprints,
    nearest_neighbours,
    neighbour_mean,
)
from brb_pipeline.stages import insights, insights_io
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers.store import make_chunks

DIM = 32
TOPICS = ["hiking trail mountain summit", "pasta recipe garlic tomato", "football match penalty goal",
          "flight airport passport luggage"]
PER_TOPIC = 60
EXTRA = 6  # batch-005: topic 1 chunks of another contact, removed in a test
SETTINGS = dict(pca_dim=10, umap_neighbors=10, hdbscan_min_cluster_size=10, hdbscan_min_samples=5, seed=42)
COORDS = ["x", "y", "x3", "y3", "z3"]
TIMINGS: dict[str, list[float]] = {}


def _centres() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(len(TOPICS), DIM))


def _vectors(topic: int, n: int, seed: int) -> np.ndarray:
    """(n, dim) unit vectors around the topic's centre."""
    rng = np.random.default_rng(seed)
    v = _centres()[topic] + rng.normal(size=(n, DIM)) * 0.35
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _texts(topic: int, n: int, tag: str) -> list[str]:
    words = TOPICS[topic].split()
    return [f"Me (10:{i % 60:02d}): {words[i % 4]} and {words[(i + 1) % 4]} {tag} {i}" for i in range(n)]


def _settings(home: Path, **kw) -> Settings:
    return Settings(home=home, **{**SETTINGS, **kw})


def _add(s: Settings, batch: str, contact: str, topic: int, n: int, *, seed: int) -> list[str]:
    """Write one partition of ``n`` chunks around ``topic`` and load it into the store; their ids."""
    chunks = make_chunks(batch, contact, n, texts=_texts(topic, n, contact))
    path = store.write_partition(s.staging_dir, batch, chunks, _vectors(topic, n, seed), "test@1")
    con = duck.connect(s.duckdb_path)
    try:
        store.load_partitions(con, {batch: path})
    finally:
        con.close()
    return chunks["chunk_id"].to_list()


def _remove(s: Settings, batch: str) -> None:
    con = duck.connect(s.duckdb_path)
    try:
        store.load_partitions(con, {}, remove_batches=[batch])
    finally:
        con.close()


def _timed(name: str, fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    TIMINGS.setdefault(name, []).append(time.perf_counter() - t0)
    return out


def _stage_times(mode: str, res: dict[str, dict]) -> None:
    for stage, meta in res.items():
        TIMINGS.setdefault(f"{mode}: {stage} ({meta.get('chunks', meta.get('points'))} chunks)", []).append(
            meta["seconds"])


def _projection(s: Settings) -> tuple[pl.DataFrame, dict]:
    path = s.staging_dir / "insights" / "projection.parquet"
    return pl.read_parquet(path), json.loads(pl.read_parquet_metadata(path)[insights_io.META_KEY])


def _clusters(s: Settings) -> dict[str, int]:
    cl = pl.read_parquet(s.staging_dir / "insights" / "clusters.parquet")
    return dict(zip(cl["chunk_id"].to_list(), cl["cluster_id"].to_list()))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    """A home with a 246-chunk store and one full insights run (the UMAP JIT is paid here)."""
    home = tmp_path_factory.mktemp("fitted")
    s = _settings(home)
    for t in range(len(TOPICS)):
        _add(s, f"batch-00{t + 1}", f"c{t}", t, PER_TOPIC, seed=10 + t)
    _add(s, "batch-005", "c1b", 1, EXTRA, seed=99)
    res = _timed("full run, first in process (UMAP JIT)", insights.run_insights, s)
    assert res["projection"]["method"] == "refit" and res["clusters"]["method"] == "hdbscan"
    assert res["clusters"]["n_clusters"] >= len(TOPICS)
    return home


@pytest.fixture
def home(fitted, tmp_path) -> Path:
    dst = tmp_path / "home"
    shutil.copytree(fitted, dst)
    return dst


def _topic_ids(topic: int) -> list[str]:
    return make_chunks("b", f"c{topic}", PER_TOPIC)["chunk_id"].to_list()


def _majority(ids: list[str], clusters: dict[str, int]) -> int:
    vals, counts = np.unique([clusters[i] for i in ids], return_counts=True)
    return int(vals[np.argmax(counts)])


def test_small_append_is_placed_next_to_its_cluster(home):
    s = _settings(home)
    before, info0 = _projection(s)
    clusters0 = _clusters(s)
    new_ids = _add(s, "batch-009", "c9", 0, 4, seed=123)

    res = _timed("place: all four stages (4 new of 250)", insights.run_insights, s)
    _stage_times("place", res)
    p, c, lab = res["projection"], res["clusters"], res["cluster_labels"]
    assert p["method"] == "placed" and p["placed"] == 4 and p["placed_share"] == round(4 / 250, 4)
    assert p["placed_since_refit"] == 4 and "refit_reason" not in p
    after, info = _projection(s)
    assert info["fit_id"] == info0["fit_id"] and info["method"] == "placed"
    # Old coordinates bit for bit, in the same (chunk id) order.
    old = after.filter(~pl.col("chunk_id").is_in(new_ids))
    assert old["chunk_id"].to_list() == before["chunk_id"].to_list()
    for col in COORDS:
        assert np.array_equal(old[col].to_numpy(), before[col].to_numpy()), col
    assert old["placed"].sum() == 0 and after.filter(pl.col("chunk_id").is_in(new_ids))["placed"].all()
    # New points land inside topic 0's region, closer to it than to any other topic (2-D and 3-D).
    for cols in (["x", "y"], ["x3", "y3", "z3"]):
        pts = {t: before.filter(pl.col("chunk_id").is_in(_topic_ids(t))).select(cols).to_numpy()
               for t in range(len(TOPICS))}
        centre = {t: np.median(v, axis=0) for t, v in pts.items()}
        radius = np.max(np.linalg.norm(pts[0] - centre[0], axis=1))
        new_pts = after.filter(pl.col("chunk_id").is_in(new_ids)).select(cols).to_numpy()
        d = np.stack([np.linalg.norm(new_pts - centre[t], axis=1) for t in range(len(TOPICS))], axis=1)
        assert (d[:, 0] <= radius).all() and (np.argmin(d, axis=1) == 0).all(), cols
    # Clusters: everyone else keeps their id; the new chunks join topic 0's majority cluster.
    assert c["method"] == "placed" and c["placed"] == 4
    clusters = _clusters(s)
    assert {k: v for k, v in clusters.items() if k not in new_ids} == clusters0
    assert {clusters[i] for i in new_ids} == {_majority(_topic_ids(0), clusters0)}
    # Four more members do not send any cluster back to the labeler.
    assert lab["labelled_now"] == 0 and lab["kept_by_overlap"] == lab["clusters"]
    assert res["insights_map"]["points"] == 250


def test_placement_imports_neither_umap_nor_numba(home):
    s = _settings(home)
    _add(s, "batch-009", "c9", 2, 3, seed=7)
    code = (
        "import json, sys\n"
        "from brb_pipeline import keys\nkeys.install()\nfrom brb_pipeline.stages import insights\n"
        "from pathlib import Path\n"
        "from brb_pipeline.config.settings import Settings\n"
        f"s = Settings(home=Path({str(home)!r}), **{SETTINGS!r})\n"
        "p = insights.run_projection(s)\n"
        "c = insights.run_clusters(s)\n"
        "print(json.dumps({'p': p['method'], 'c': c['method'], "
        "'mods': sorted(m for m in ('umap', 'numba', 'hdbscan') if m in sys.modules)}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"p": "placed", "c": "placed", "mods": []}


def test_too_many_new_chunks_refit(home):
    s = _settings(home)
    new_ids = _add(s, "batch-009", "c9", 0, 20, seed=5)  # 20 of 266: 7.5% > 5%
    p = _timed("refit: projection (266 chunks)", insights.run_projection, s)
    assert p["method"] == "refit" and "20 new chunks" in p["refit_reason"]
    c = insights.run_clusters(s)
    assert c["method"] == "hdbscan"
    proj, info = _projection(s)
    assert info["placed_since_refit"] == 0 and not proj["placed"].any()
    assert set(new_ids) <= set(_clusters(s))
    # A cluster that grew by a third is labelled again; the untouched ones keep their labels.
    lab = insights.run_labels(s)
    assert lab["labelled_now"] >= 1 and lab["kept_by_overlap"] >= 1


def test_placed_share_accumulates_until_a_refit(home):
    s = _settings(home)
    _add(s, "batch-009", "c9", 0, 8, seed=5)  # 8 of 254: 3.1%
    first = insights.run_projection(s)
    insights.run_clusters(s)
    assert first["method"] == "placed" and first["placed_since_refit"] == 8
    _add(s, "batch-010", "c10", 3, 8, seed=6)  # 8 more: 16 of 262 placed since the refit, 6.1%
    second = insights.run_projection(s)
    assert second["method"] == "refit" and "16 chunks placed since the last refit" in second["refit_reason"]
    # A looser limit would have placed them.
    _, info = _projection(s)
    assert info["placed_since_refit"] == 0
    loose = _settings(home, insights_refit_share=0.1)
    _add(loose, "batch-011", "c11", 2, 8, seed=8)
    assert insights.run_projection(loose)["method"] == "placed"


@pytest.mark.parametrize("change, reason", [
    ("model", "embedding model changed"),  # every partition re-embedded by another model
    ("layout", "layout settings changed"),  # another UMAP min_dist
])
def test_model_or_layout_change_refits(home, change, reason):
    s = _settings(home)
    if change == "model":
        paths = {}
        for t in range(len(TOPICS)):
            b = f"batch-00{t + 1}"
            chunks = make_chunks(b, f"c{t}", PER_TOPIC, texts=_texts(t, PER_TOPIC, f"c{t}"))
            paths[b] = store.write_partition(s.staging_dir, b, chunks, _vectors(t, PER_TOPIC, 10 + t), "test@2")
        con = duck.connect(s.duckdb_path)
        try:  # the same vectors, as if another model had made them: everything is reloaded
            store.load_partitions(con, paths, remove_batches=["batch-005"], replace_all=True)
        finally:
            con.close()
    else:
        s = _settings(home, umap_min_dist=0.3)
    p = insights.run_projection(s)
    assert p["method"] == "refit" and p["refit_reason"].startswith(reason)
    assert insights.run_clusters(s)["method"] == "hdbscan"
    if change == "model":
        assert _projection(s)[1]["embedding_model"] == "test@2"


def test_removed_chunks_vanish_from_projection_and_clusters(home):
    s = _settings(home)
    before, _ = _projection(s)
    clusters0 = _clusters(s)
    gone = make_chunks("batch-005", "c1b", EXTRA)["chunk_id"].to_list()
    assert set(gone) <= set(before["chunk_id"].to_list())
    _remove(s, "batch-005")
    res = insights.run_insights(s)
    p, c = res["projection"], res["clusters"]
    assert p["method"] == "placed" and p["placed"] == 0 and p["removed"] == EXTRA
    after, _ = _projection(s)
    clusters = _clusters(s)
    assert after.height == len(clusters) == 4 * PER_TOPIC
    assert not set(gone) & set(after["chunk_id"].to_list()) and not set(gone) & set(clusters)
    kept = before.filter(~pl.col("chunk_id").is_in(gone))
    assert after.select("chunk_id", *COORDS).equals(kept.select("chunk_id", *COORDS))
    assert clusters == {k: v for k, v in clusters0.items() if k not in gone}
    assert c["method"] == "placed" and res["insights_map"]["points"] == 4 * PER_TOPIC


def test_nothing_changed_keeps_everything(home):
    s = _settings(home)
    before, info0 = _projection(s)
    p = _timed("place: projection, nothing changed (246)", insights.run_projection, s)
    assert p["method"] == "placed" and p["placed"] == 0
    after, info = _projection(s)
    assert after.equals(before) and info["fit_id"] == info0["fit_id"]


def test_refit_flag_and_cli(home):
    s = _settings(home)
    _, info0 = _projection(s)
    res = _timed("refit: all four stages (246)", insights.run_insights, s, refit=True)
    _stage_times("refit", res)
    p = res["projection"]
    assert p["method"] == "refit" and p["refit_reason"] == "refit asked"
    assert res["clusters"]["method"] == "hdbscan"
    _, info1 = _projection(s)
    assert info1["fit_id"] != info0["fit_id"]

    s.save()  # the CLI reads the test's layout settings from <home>/config.json
    _add(s, "batch-009", "c9", 0, 2, seed=3)  # small enough to place, but --refit refits
    r = _timed("refit: `brb insights --refit` (248)", CliRunner().invoke, main,
               ["insights", "--refit", "--home", str(home)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1].endswith("map.html")
    proj, info2 = _projection(s)
    assert info2["method"] == "refit" and info2["fit_id"] != info1["fit_id"] and proj.height == 248
    assert pl.read_parquet_metadata(s.staging_dir / "insights" / "clusters.parquet")[insights_io.META_KEY]
    r = CliRunner().invoke(main, ["insights", "--refit", "--home", str(home / "nowhere")])
    assert r.exit_code != 0 and "run `brb ingest` first" in r.output


def test_report_timings():
    """Prints the stage timings the tests above observed (pytest -s shows them)."""
    if not TIMINGS:
        pytest.skip("run with the other tests of this module")
    for name, secs in TIMINGS.items():
        print(f"{name}: {', '.join(f'{x:.2f} s' for x in secs)}")
    assert all(x > 0 for secs in TIMINGS.values() for x in secs)


# --- The numeric pieces ---------------------------------------------------------------------


def test_nearest_neighbours_blocked_equals_brute_force():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(300, 16)).astype(np.float32)
    q = rng.normal(size=(37, 16)).astype(np.float32)
    allowed = rng.random(300) < 0.7
    unit = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    sims = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ unit.T
    sims[:, ~allowed] = -np.inf
    want = np.argsort(-sims, axis=1, kind="stable")[:, :5]
    # ~3 query rows per block: many blocks.
    idx, got = nearest_neighbours(ref, q, 5, allowed=allowed, block_bytes=3 * 4 * 300)
    assert np.array_equal(idx, want) and allowed[idx].all()
    assert np.allclose(got, np.take_along_axis(sims, want, axis=1), atol=1e-5)
    # k beyond the allowed rows is clamped; no allowed row gives k = 0.
    few = np.zeros(300, bool)
    few[[3, 9]] = True
    assert nearest_neighbours(ref, q, 5, allowed=few)[0].shape == (37, 2)
    assert nearest_neighbours(ref, q, 5, allowed=np.zeros(300, bool))[0].shape == (37, 0)


def test_neighbour_mean_weights_by_similarity():
    coords = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    idx = np.array([[0, 1], [1, 2], [0, 2]])
    sims = np.array([[0.75, 0.25], [0.5, 0.5], [-0.3, -0.1]])
    out = neighbour_mean(coords, idx, sims)
    # row 0: 3/4 at the origin; row 1: midpoint; row 2: no positive weight, plain mean
    assert np.allclose(out, [[2.5, 0.0], [5.0, 5.0], [0.0, 5.0]]) and out.dtype == np.float32


@pytest.mark.parametrize("labels, sims, expected", [
    ([[3, 3, 1]], [[0.5, 0.5, 0.9]], [3]),  # plurality wins over one more similar neighbour
    ([[-1, -1, 2]], [[0.9, 0.9, 0.9]], [-1]),  # noise majority stays noise
    ([[1, 2]], [[0.4, 0.8]], [2]),  # count tie: the more similar side
    ([[-1, 4]], [[0.5, 0.5]], [-1]),  # exact tie: the lower id (noise)
    ([[5, 5], [0, 7]], [[0.1, 0.1], [0.2, 0.9]], [5, 7]),  # rows independent
])
def test_vote_by_neighbours(labels, sims, expected):
    assert vote_by_neighbours(np.array(labels), np.array(sims)).tolist() == expected


def test_fingerprints_see_any_change():
    x = _vectors(0, 5, 1)
    y = x.copy()
    y[2, 7] = np.nextafter(y[2, 7], np.float32(2))  # one ulp
    fx, fy = embedding_fingerprints(x), embedding_fingerprints(y)
    assert fx.dtype == np.uint64 and np.array_equal(fx, embedding_fingerprints(x.copy()))
    assert (fx != fy).tolist() == [False, False, True, False, False]


def test_load_store_aligns_streamed_vectors_with_chunk_order_after_deletes(tmp_path):
    """Vectors are read in table order and placed by rowid: after deletes and a reload (rowids
    no longer follow chunk_id order) row i is still chunk i's vector."""
    s = Settings.load(tmp_path / "home", embedding_model="hash")
    con = duck.connect(s.duckdb_path)
    rng = np.random.default_rng(3)
    parts, vectors = {}, {}
    for b, contact in (("batch-002", "zed"), ("batch-001", "amy"), ("batch-003", "kim")):
        frame = make_chunks(b, contact, 7)
        v = rng.standard_normal((7, 8)).astype(np.float32)
        vectors.update(zip(frame["chunk_id"].to_list(), v))
        parts[b] = store.write_partition(s.staging_dir, b, frame, v, "m@1")
    store.load_partitions(con, parts)
    store.delete_contacts(con, ["amy"])
    store.load_partitions(con, {"batch-001": parts["batch-001"]})  # amy again, now last in the table
    con.close()
    rows, emb, _ = insights.load_store(s, ("chunk_id", "contact_id"))
    ids = rows["chunk_id"].to_list()
    assert ids == sorted(vectors) and emb.shape == (21, 8)
    np.testing.assert_array_equal(emb, np.stack([vectors[c] for c in ids]))
    only_rows, none, _ = insights.load_store(s, ("content",), vectors=False)
    assert only_rows.columns == ["chunk_id", "content"] and none.size == 0
