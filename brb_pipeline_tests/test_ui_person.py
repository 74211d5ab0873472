"""Finding a person in the Dagster UI: the people table on `contact_batches`, the
`contact_backfill_job` launched with `contact: "Name"`, and `forget`
taking both out of Dagster's storage again.

One home built by a real ingestion (hash embedder, no insights), then the job run in-process
against the home's own Dagster instance, as the UI's run worker would run it.
"""

import json
import re

import dagster as dg
import polars as pl
import pytest

from brb_pipeline.orchestration.jobs import contact_backfill_job
from brb_pipeline.core import metadata
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.core.errors import BrbError
from brb_pipeline.orchestration.definitions import defs
from brb_pipeline.orchestration.graph import resources
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.stages.ingest import PEOPLE_SEPARATOR, people_table
from brb_pipeline.search.query import run_search
from brb_pipeline.orchestration.history import wipe_derived_events
from brb_pipeline.orchestration.instance import instance_for
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers.bytescan import scan, summary

_CELL = re.compile(r"(?<!\\)\|")
_PERSON = re.compile(r"^(?P<name>.*) \((?P<n>[\d,]+)\)$")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui_person")
    archive = build_demo_archive(root / "archive", messages=600, seed=7)
    s = Settings.load(root / "home", chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                      embedding_model="hash", hdbscan_min_cluster_size=8, umap_neighbors=10)
    first = run_ingest(s, analyze=False)
    return s, first


def _rows(table: str) -> list[tuple[str, list[tuple[str, int]], int]]:
    """(batch, [(name, messages)], messages) per row of a people table; names unescaped."""
    lines = table.splitlines()
    assert lines[:2] == ["| batch | people | messages |", "|---|---|---:|"]
    out = []
    for line in lines[2:]:
        cells = [c.strip() for c in _CELL.split(line)[1:-1]]
        assert len(cells) == 3, line
        people = []
        for p in cells[1].split(PEOPLE_SEPARATOR):
            m = _PERSON.match(p)
            assert m, p
            people.append((re.sub(r"\\(.)", r"\1", m["name"]), int(m["n"].replace(",", ""))))
        out.append((cells[0], people, int(cells[2].replace(",", ""))))
    return out


def _people_metadata(s: Settings) -> dg.MetadataValue:
    ev = instance_for(s).get_latest_materialization_event(dg.AssetKey("contact_batches"))
    assert ev is not None
    return ev.asset_materialization.metadata["people"]


def test_people_table_escapes_names_and_orders_by_rank():
    contacts = pl.DataFrame({
        "contact_id": ["c:1", "c:2", "c:3", "c:4"],
        "display_name": ["Ana | Bo", "Zoë *Star*", "Carl", "Nobody"],
        "batch": ["batch-001", "batch-000", "batch-000", None],
        "messages": [5, 1200, 30, 9],
        "rank": [3, 1, 2, 4],
    })
    assert people_table(contacts).splitlines() == [
        "| batch | people | messages |",
        "|---|---|---:|",
        r"| batch-000 | Zoë \*Star\* (1,200) · Carl (30) | 1,230 |",  # by rank; markup escaped
        r"| batch-001 | Ana \| Bo (5) | 5 |",  # a pipe does not split the cell
    ]  # no batch (c:4): not in any partition, not listed
    assert _rows(people_table(contacts))[1] == ("batch-001", [("Ana | Bo", 5)], 5)


def test_contact_batches_metadata_lists_every_contact_once_with_its_batch(home):
    s, _ = home
    value = _people_metadata(s)
    assert isinstance(value, dg.MarkdownMetadataValue)  # rendered as a table in the UI
    listed = [(name, batch, n) for batch, people, _ in _rows(value.value) for name, n in people]
    contacts = metadata.read_contacts(s.brb_db).filter(pl.col("batch").is_not_null())
    expected = list(zip(contacts["display_name"], contacts["batch"], contacts["messages"]))
    assert len(expected) >= 10 and contacts["name_source"].eq("addressbook").sum() >= 3
    assert sorted(listed) == sorted(expected)  # every contact exactly once, in its own batch
    batches = [b for b, _, _ in _rows(value.value)]
    assert len(batches) >= 2 and batches == sorted(b["batch"] for b in metadata.all_batches(s.brb_db))
    texts = pl.read_parquet(s.paths.messages, columns=["text"])["text"].drop_nulls()
    long = [t for t in texts.to_list() if len(t) >= 20]
    assert long and not [t for t in long if t in value.value]  # names and counts, never message text


def _partitions_run(instance: dg.DagsterInstance, after: set[str]) -> list[str]:
    runs = [r for r in instance.get_runs() if r.run_id not in after]
    return sorted(r.tags["dagster/partition"] for r in runs if "dagster/partition" in r.tags)


def test_contact_backfill_job_runs_only_that_persons_batch(home):
    s, first = home
    target = metadata.read_contacts(s.brb_db).filter(pl.col("name_source") == "addressbook").sort("rank").row(
        3, named=True)
    instance = instance_for(s)
    before = {r.run_id for r in instance.get_runs()}
    assert not (s.insights_dir / "map.html").exists()
    assert defs.resolve_job_def("contact_backfill_job").name == "contact_backfill_job"  # in the UI's Jobs
    result = contact_backfill_job.execute_in_process(
        run_config={"ops": {"backfill_contact_op": {"config": {"contact": target["display_name"]}}}},
        instance=instance, resources=resources(home=str(s.home)))
    assert result.success
    meta = [ev for ev in result.all_events if ev.event_type_value == "STEP_OUTPUT"][0].event_specific_data.metadata
    assert meta["batches_processed"].value == target["batch"]
    assert target["display_name"] not in repr(meta)  # the name is in the run config only
    # nested runs: the ingestion, that one partition, then the store, indexes and insights
    assert _partitions_run(instance, before | {result.run_id}) == [target["batch"]]
    # ... named by what they do, each tagged with the UI run that started it
    children = [r for r in instance.get_runs() if r.run_id not in before | {result.run_id}]
    assert {r.job_name for r in children} == {"ingest_job", "batch_job", "finalize_job"}
    assert {(r.tags["brb/source"], r.tags["brb/parent_run"], r.tags["brb/parent_job"]) for r in children} == {
        ("ui", result.run_id, "contact_backfill_job")}
    assert not any(r.job_name.startswith("__") for r in instance.get_runs())  # no ephemeral job
    # in the code location brb ui loads, so the Overview timeline and the job's Runs tab list them
    origins = {(r.remote_job_origin.repository_origin.code_location_origin.location_name,
                r.remote_job_origin.job_name) for r in children}
    assert origins == {("brb_pipeline", "ingest_job"), ("brb_pipeline", "batch_job"), ("brb_pipeline", "finalize_job")}
    assert {r.tags["brb/source"] for r in instance.get_runs() if r.run_id in before} == {"cli"}
    assert meta["chunks"].value == first["chunks"]  # a rerun partition replaces, never duplicates
    assert (s.insights_dir / "map.html").stat().st_size > 10_000
    hits = run_search(s, "the", embedder=HashEmbedder(), contacts=[target["contact_id"]], k=3)["hits"]
    # --contact is the person's conversations: their 1:1 chat and the groups they take part in
    from brb_pipeline.core.contacts.people_db import conversations_of

    theirs = set(conversations_of(s.brb_db, [target["contact_id"]]))
    assert hits and target["contact_id"] in theirs and {h["contact_id"] for h in hits} <= theirs


def test_an_unknown_name_fails_with_one_clear_line(home):
    s, _ = home
    instance = instance_for(s)
    before = {r.run_id for r in instance.get_runs()}
    result = contact_backfill_job.execute_in_process(
        run_config={"ops": {"backfill_contact_op": {"config": {"contact": "Zebulon Quux"}}}},
        instance=instance, resources=resources(home=str(s.home)), raise_on_error=False)
    assert not result.success
    failure = [ev for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"][0]
    err = failure.step_failure_data.user_failure_data.description
    assert err == ("brb: error: no contact matches 'Zebulon Quux': see `brb status` or use a handle "
                   "(+15551234567, a@b.com)")
    assert _partitions_run(instance, before | {result.run_id}) == []  # nothing ran
    assert [r for r in instance.get_runs() if r.run_id not in before] == [instance.get_run_by_id(result.run_id)]


def test_a_home_never_ingested_is_one_line_too(tmp_path):
    from brb_pipeline.orchestration.jobs import backfill_contact

    with pytest.raises(BrbError, match=r"^nothing ingested in .*: run `brb ingest` \(or materialize all\) first$"):
        backfill_contact(Settings(home=tmp_path / "empty"), "Ana")


def test_forget_wipes_the_people_table_and_the_backfill_runs(home):
    """Last in the module: it wipes the home's Dagster history."""
    s, _ = home
    person = metadata.read_contacts(s.brb_db).filter(pl.col("name_source") == "addressbook").sort("rank").row(
        3, named=True)
    name = person["display_name"]
    # this test's own backfill run (its run config names the person): under pytest-xdist the
    # module's other tests may run in another process, on another copy of the home
    result = contact_backfill_job.execute_in_process(
        run_config={"ops": {"backfill_contact_op": {"config": {"contact": name, "insights": False}}}},
        instance=instance_for(s), resources=resources(home=str(s.home)))
    assert result.success
    needles = sorted({name, json.dumps(name)[1:-1]})  # Dagster stores events as ASCII JSON ("\\u00e9")
    found = scan(s.dagster_home, needles)
    # before: in the table's materializations and step outputs, and in the job's run config
    assert {"history/runs/index.db", "history/runs.db"} <= {f.path for f in found}, summary(found)
    assert wipe_derived_events(s) == 4
    found = scan(s.dagster_home, needles)
    assert not found, "after wipe_derived_events:\n" + summary(found)
    instance = instance_for(s)
    assert instance.get_runs(filters=dg.RunsFilter(job_name="contact_backfill_job")) == []
    assert instance.get_latest_materialization_event(dg.AssetKey("contact_batches")) is None
    assert instance.get_latest_materialization_event(dg.AssetKey("chunk_store")) is not None  # the rest stays

