"""Encrypted homes, the staging side (issue 15): every staged file is sealed and read back right,
the map is drawn only when it is opened (outside the home), and Dagster's storage gets no text.

One demo archive is ingested twice with real SQLite, DuckDB and Dagster: into an encrypted home
and into a plaintext one, the control that shows each check can fail. The embedder is the hash
one and the memory's model a scripted one (these tests are about files, not models).
"""

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from dagster._serdes import serialize_value

from brb_pipeline.cli.app import main
from brb_pipeline.core import metadata
from brb_pipeline.core.crypto import files
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.core.memory.generate import ScriptedGenerator
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.keys import provider as keys
from brb_pipeline.stages.insights import MAP_WHEN_OPENED
from brb_pipeline.orchestration.instance import instance_for
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers import bytescan

#: What the scripted model says of every month: a topic whose summary is a distinctive phrase.
PROMISE = "promised to bring the marzipan zeppelin"
REPLY = json.dumps([{"label": "Zeppelin errand", "summary": f"They {PROMISE} on Friday.",
                     "first_message": 1, "last_message": 2}])


def _ingest(root: Path, archive, name: str, encrypted: bool, mp: pytest.MonkeyPatch) -> Settings:
    mp.setenv("BRB_ENCRYPTION", "1" if encrypted else "0")
    s = Settings.load(root / name, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                      embedding_model="hash", hdbscan_min_cluster_size=8, umap_neighbors=10)
    keys.prepare_home(s)
    run_ingest(s, embedder=HashEmbedder(dim=64), generator=ScriptedGenerator([REPLY]))
    return s


@pytest.fixture(scope="module")
def homes(tmp_path_factory):
    """(encrypted settings, plaintext settings, needles): the key dir stays set for the module."""
    root = tmp_path_factory.mktemp("enc_stage")
    archive = build_demo_archive(root / "archive", messages=600, seed=5)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BRB_KEY_DIR", str(root / "keys"))
        enc = _ingest(root, archive, "enc", True, mp)
        plain = _ingest(root, archive, "plain", False, mp)
        yield enc, plain, _needles(plain)


def _needles(s: Settings) -> dict[str, list[str]]:
    """Distinctive message phrases, contact names, handles and cluster labels of the demo home."""
    contacts = metadata.read_contacts(s.brb_db)
    named = contacts.filter(contacts["name_source"] == "addressbook")
    names = sorted(named["display_name"].to_list(), key=len, reverse=True)[:4]
    handles = sorted({h for hs in named["handles"].to_list() for h in hs if len(h) >= 8})[:4]
    texts = [t for t in files.read_parquet(s.paths.messages, columns=["text"])["text"].to_list()
             if t and len(t) >= 40]
    phrases = [t[8:36] for t in sorted(texts, key=len, reverse=True)[:4]]
    labels = [lab for lab in files.read_parquet(s.paths.cluster_labels)["label"].to_list() if len(lab) >= 8][:3]
    assert names and handles and len(phrases) == 4 and labels
    return {"names": names, "handles": handles, "phrases": phrases + [PROMISE], "labels": labels}


def _all(needles: dict[str, list[str]]) -> list[str]:
    return [n for group in needles.values() for n in group]


def _staged(s: Settings) -> list[Path]:
    """Every staged file, the per-batch partitions (chunks with their vectors) included."""
    return [p for p in sorted(s.staging_dir.rglob("*")) if p.is_file()]


def test_every_staged_file_is_sealed_and_holds_no_phrase_name_or_handle(homes):
    enc, plain, needles = homes
    staged = _staged(enc)
    names = {str(p.relative_to(enc.staging_dir)) for p in staged}
    # the stages' files are all there: parse, contacts, chunking, embedding, memory, insights
    assert {"parsed_messages.parquet", "parsed_chats.parquet", "messages.parquet", "insights/projection.parquet",
            "insights/clusters.parquet", "insights/labels.parquet", "insights/label_cache.json"} <= names
    for sub in ("chunked", "chunks", "topics", "profiles"):
        assert any(n.startswith(f"{sub}/batch=") for n in names), sub
    assert any(n.endswith(".parquet.embedcfg") for n in names)
    assert [str(p) for p in staged if not files.sealed(p)] == []
    found = bytescan.scan(enc.staging_dir, _all(needles))
    assert found == [], bytescan.summary(found)
    # the control: the plaintext home's Parquet (read with its reader: zstd hides raw phrases) and
    # JSON hold every kind of needle, and none of its files is sealed
    plain_found = {f.needle for f in bytescan.scan(plain.staging_dir, _all(needles))}
    for kind, group in needles.items():
        assert plain_found & set(group), kind
    assert not any(files.sealed(p) for p in _staged(plain))


def test_the_stages_read_their_sealed_inputs_as_the_plaintext_run_did(homes):
    enc, plain, _ = homes
    for p in _staged(plain):
        rel = p.relative_to(plain.staging_dir)
        other = enc.staging_dir / rel
        if p.suffix == ".parquet":
            a, b = files.read_parquet(other), files.read_parquet(p)
            assert a.equals(b), rel
            assert _kv(other) == _kv(p), rel
        elif p.suffix == ".json":
            assert files.read_json(other) == files.read_json(p), rel
        else:
            assert files.read_bytes(other) == files.read_bytes(p), rel
    assert metadata.count_clusters(enc.brb_db) == metadata.count_clusters(plain.brb_db) >= 1


def _kv(path: Path) -> dict:
    """A Parquet file's key-value metadata, less the layout's random fit id (one per run)."""
    kv = dict(files.parquet_file(path).metadata.metadata or {})
    if b"brb.insights" in kv:
        info = json.loads(kv[b"brb.insights"])
        info.pop("fit_id", None)
        kv[b"brb.insights"] = info
    return kv


def test_an_encrypted_home_keeps_no_map_file(homes):
    enc, plain, needles = homes
    drawn = [p for p in enc.home.rglob("*") if p.suffix in (".html", ".png")]
    assert drawn == []
    meta = _latest_meta(enc, "insights_map")
    assert meta["map"] == MAP_WHEN_OPENED and "html" not in meta and "preview" not in meta
    # the control: a plaintext home has the map, and it quotes names
    page = (plain.insights_dir / "map.html").read_text(encoding="utf-8")
    assert any(n in page for n in needles["names"])


def test_opening_the_map_draws_it_outside_the_home_then_deletes_it(homes, monkeypatch):
    enc, _, needles = homes
    monkeypatch.setenv("BRB_KEY_DIR", os.environ["BRB_KEY_DIR"])
    seen = {}

    def fake_open(uri: str) -> bool:
        page = Path(uri.removeprefix("file://"))
        seen.update(page=page, text=page.read_text(encoding="utf-8"),
                    mode=stat.S_IMODE(page.parent.stat().st_mode), files=sorted(q.name for q in page.parent.iterdir()))
        return True

    monkeypatch.setattr("webbrowser.open", fake_open)
    r = CliRunner().invoke(main, ["insights", "--open", "--wait", "0", "--home", str(enc.home)])
    assert r.exit_code == 0, r.output
    page = Path(r.stdout.strip().splitlines()[-1])
    assert page == seen["page"] and page.name == "map.html"
    assert not page.is_relative_to(enc.home.resolve()) and seen["mode"] == 0o700
    assert seen["files"] == ["map.html", "map.png", "map_3d.html"]
    assert any(n in seen["text"] for n in needles["names"])  # the real map, names and all
    assert not page.parent.exists()
    assert not [p for p in enc.home.rglob("*") if p.suffix in (".html", ".png")]


def test_keep_writes_the_map_where_asked_but_never_inside_the_encrypted_home(homes, tmp_path):
    enc, _, _ = homes
    r = CliRunner().invoke(main, ["insights", "--keep", str(tmp_path / "map"), "--home", str(enc.home)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == str((tmp_path / "map" / "map.html").resolve())
    assert (tmp_path / "map" / "map_3d.html").stat().st_size > 10_000
    inside = enc.home / "mine"
    r = CliRunner().invoke(main, ["insights", "--keep", str(inside), "--home", str(enc.home)])
    assert r.exit_code != 0 and r.stderr.startswith(f"brb: error: {inside.resolve()} is inside the encrypted home")
    assert not inside.exists()


def _latest_meta(s: Settings, asset: str) -> dict:
    import dagster as dg

    ev = instance_for(s).get_latest_materialization_event(dg.AssetKey(asset))
    return {k: getattr(v, "value", v) for k, v in ev.asset_materialization.metadata.items()}


def _events_text(s: Settings) -> str:
    """Every event of every run in the home's Dagster instance, as Dagster stores it (serialized)."""
    instance = instance_for(s)
    return "\n".join(serialize_value(ev) for run in instance.get_runs() for ev in instance.all_logs(run.run_id))


def _in(needle: str, text: str) -> bool:
    return needle in text or json.dumps(needle)[1:-1] in text


def test_dagster_keeps_no_label_name_or_handle_of_an_encrypted_home(homes):
    enc, plain, needles = homes
    for asset in ("contact_batches", "cluster_labels", "insights_map", "batch_topics", "parsed_messages"):
        assert _latest_meta(enc, asset)  # materialized, with counts
    assert _latest_meta(enc, "parsed_messages")["messages"] == _latest_meta(plain, "parsed_messages")["messages"]
    assert _latest_meta(enc, "projection")["method"] == _latest_meta(plain, "projection")["method"] == "refit"
    assert "people" not in _latest_meta(enc, "contact_batches") and "people" in _latest_meta(plain, "contact_batches")
    text = _events_text(enc)
    assert [n for n in _all(needles) if _in(n, text)] == []
    # the control: the plaintext home's events hold the people table and the cluster labels
    plain_text = _events_text(plain)
    for kind in ("names", "labels"):
        assert any(_in(n, plain_text) for n in needles[kind]), kind
    # and the raw files of the encrypted home's Dagster storage hold no name or handle
    found = bytescan.scan(enc.dagster_home, needles["names"] + needles["handles"] + needles["labels"])
    assert found == [], bytescan.summary(found)


def test_the_metadata_filter_keeps_numbers_and_listed_settings_only(tmp_path, monkeypatch):
    import dagster as dg

    from brb_pipeline.orchestration.results import safe_metadata

    monkeypatch.setenv("BRB_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("BRB_ENCRYPTION", "1")
    enc = Settings(home=tmp_path / "enc")
    keys.prepare_home(enc)
    monkeypatch.setenv("BRB_ENCRYPTION", "0")
    plain = Settings(home=tmp_path / "plain")
    keys.prepare_home(plain)
    meta = {
        "messages": 12,  # a count: kept
        "share": 0.25,  # a ratio: kept
        "skipped": False,  # a flag: kept
        "first_ts": None,  # nothing yet: kept
        "method": "refit",  # a listed setting: kept
        "people": dg.MetadataValue.md("| batch-000 | Ana Lima (3) |"),  # names: dropped
        "top_label": "Ana's birthday",  # text under a key not listed: dropped
        "map": dg.MetadataValue.md("..."),  # a listed key, but not plain text: dropped
        "handles": ["+15551234567"],  # a list: dropped
    }
    assert safe_metadata(enc, meta) == {k: meta[k] for k in ("messages", "share", "skipped", "first_ts", "method")}
    assert safe_metadata(plain, meta) == meta
