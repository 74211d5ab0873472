"""Finding a person's partitions by name in an encrypted home, without the name reaching a file.

One encrypted home built by a real ingestion (hash embedder, no insights). Then:
`brb people --partitions` (a real process), the finder `brb ui` serves (its HTTP server for real,
on 127.0.0.1; what it launches goes to a recording stand-in for Dagster's GraphQL endpoint, the
real endpoint is driven in test_ui_browser.py), and `contact_backfill_job` run with the partition
keys it hands over, against the home's own Dagster instance.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import polars as pl
import pytest

from brb_pipeline.orchestration.jobs import backfill_contact, contact_backfill_job
from brb_pipeline.core import metadata
from brb_pipeline.core.contacts.partitions import person_partitions
from brb_pipeline.core.contacts.people_db import person_contact_ids
from brb_pipeline.core.errors import BrbError
from brb_pipeline.orchestration.definitions import resources
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.keys import provider as keys
from brb_pipeline.orchestration.runner import instance_for, run_ingest
from brb_pipeline.config.settings import Settings
from brb_pipeline.orchestration.finder import Finder, FinderServer
from brb_pipeline_tests.helpers.bytescan import scan, summary
from brb_pipeline_tests.helpers.cli import ENV, brb


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    root = tmp_path_factory.mktemp("finder")
    archive = build_demo_archive(root / "archive", messages=600, seed=7)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BRB_ENCRYPTION", "1")
        mp.setenv("BRB_KEY_DIR", str(root / "keys"))
        s = Settings.load(root / "home", chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                          embedding_model="hash", hdbscan_min_cluster_size=8, umap_neighbors=10)
        keys.prepare_home(s)
        run_ingest(s, analyze=False)
        assert (keys.read_marker(s.home) or {}).get("encrypted")
        yield s, root / "keys"


def _person(s: Settings) -> tuple[str, list[str]]:
    """A named person and the partitions of every conversation they are in (1:1 and groups)."""
    contacts = metadata.read_contacts(s.brb_db)
    named = contacts.filter((pl.col("name_source") == "addressbook") & (pl.col("kind") == "direct")
                            & pl.col("batch").is_not_null()).sort("rank")
    name = named["display_name"][0]
    theirs = person_contact_ids(s.brb_db, [name])
    return name, sorted(set(contacts.filter(pl.col("contact_id").is_in(theirs))["batch"].drop_nulls()))


def test_people_partitions_prints_a_persons_partitions_and_one_line_for_a_stranger(home):
    s, keydir = home
    name, wanted = _person(s)
    env = {**ENV, "BRB_ENCRYPTION": "1", "BRB_KEY_DIR": str(keydir)}
    r = brb("people", "--partitions", "--find", name, "--json", home=s.home, env=env)
    assert r.returncode == 0, r.stderr
    (found,) = [p for p in json.loads(r.stdout)["people"] if p["name"] == name]
    assert found["partitions"] == wanted and {c["partition"] for c in found["conversations"]} == set(wanted)
    assert any(c["conversation"] == "1:1" for c in found["conversations"])
    r = brb("people", "--partitions", home=s.home, env=env)  # everyone, one line each
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == len(person_partitions(s.brb_db))
    assert any(line.startswith(name) and ",".join(wanted) in line for line in lines)
    r = brb("people", "--partitions", "--find", "Zebulon Quux", home=s.home, env=env)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "brb: error: no person matches 'Zebulon Quux': see `brb people` or use a handle"]


class _Dagster(BaseHTTPRequestHandler):
    """Records what the finder posts to Dagster's /graphql and answers a launched run."""

    posted: list[dict] = []

    def log_message(self, *args):
        return

    def do_POST(self):  # noqa: N802
        _Dagster.posted.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        body = json.dumps({"data": {"launchRun": {"__typename": "LaunchRunSuccess",
                                                  "run": {"runId": "run-123"}}}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _get(url: str, host: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_finder_answers_only_with_its_token_and_relaunches_by_partition_not_name(home):
    s, _ = home
    name, wanted = _person(s)
    files_before = {p: p.stat().st_mtime_ns for p in s.home.rglob("*") if p.is_file()}
    dagster = ThreadingHTTPServer(("127.0.0.1", 0), _Dagster)
    threading.Thread(target=dagster.serve_forever, daemon=True).start()
    server = FinderServer(Finder(s.brb_db, f"http://127.0.0.1:{dagster.server_address[1]}")).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        q = urllib.request.quote(name.split()[0])
        assert _get(f"{base}/find?q={q}")[0] == 403  # no token
        assert _get(f"{base}/find?q={q}&t=guess")[0] == 403
        assert _get(f"{base}/find?q={q}&t={server.token}", host="evil.example:80")[0] == 403  # rebinding
        status, page = _get(server.url)
        assert status == 200 and b"Find a person" in page and b"http" not in page.split(b"<script>")[1]
        status, body = _get(f"{base}/find?q={q}&t={server.token}")
        people = json.loads(body)["people"]
        assert status == 200 and name in [p["name"] for p in people]
        found = next(p for p in people if p["name"] == name)
        assert found["partitions"] == wanted and "person_id" not in found  # no handle handed out
        assert found["links"][wanted[0]].endswith(f"/assets/batch_chunks?view=partitions&partition={wanted[0]}")
        req = urllib.request.Request(f"{base}/rerun?t={server.token}", method="POST",
                                     data=json.dumps({"partitions": wanted}).encode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["run_id"] == "run-123"
        (posted,) = _Dagster.posted
        params = posted["variables"]["p"]
        assert params["selector"]["jobName"] == "contact_backfill_job"
        assert params["runConfigData"] == {"ops": {"backfill_contact_op": {"config": {"partitions": wanted}}}}
        assert name not in json.dumps(posted, ensure_ascii=False)  # Dagster never hears the name
        assert {"key": "brb/source", "value": "ui"} in params["executionMetadata"]["tags"]
    finally:
        server.stop()
        dagster.shutdown()
    # the lookups changed no file of the home and left the name in none (brb.db is sealed)
    assert {p: p.stat().st_mtime_ns for p in s.home.rglob("*") if p.is_file()} == files_before
    found = scan(s.home, [name])
    assert not found, summary(found)


def test_backfill_by_partition_runs_those_batches_and_keeps_the_name_out_of_dagster(home):
    s, _ = home
    name, wanted = _person(s)
    instance = instance_for(s)
    before = {r.run_id for r in instance.get_runs()}
    result = contact_backfill_job.execute_in_process(
        run_config={"ops": {"backfill_contact_op": {"config": {"partitions": wanted, "insights": False}}}},
        instance=instance, resources=resources(home=str(s.home)), tags={"brb/source": "ui"})
    assert result.success
    meta = [ev for ev in result.all_events if ev.event_type_value == "STEP_OUTPUT"][0].event_specific_data.metadata
    assert sorted(meta["batches_processed"].value.split(", ")) == wanted
    children = [r for r in instance.get_runs() if r.run_id not in before | {result.run_id}]
    assert sorted(r.tags["dagster/partition"] for r in children if "dagster/partition" in r.tags) == wanted
    assert {(r.tags["brb/source"], r.tags["brb/parent_run"], r.tags["brb/parent_job"]) for r in children} == {
        ("ui", result.run_id, "contact_backfill_job")}
    needles = sorted({name, json.dumps(name)[1:-1]})
    found = scan(s.dagster_home, needles)
    assert not found, summary(found)  # no name in Dagster's run storage, events or logs


def test_backfill_takes_a_name_or_partitions_and_says_which_partition_is_unknown(home):
    s, _ = home
    name, wanted = _person(s)
    with pytest.raises(BrbError, match="either `contact`"):
        backfill_contact(s, name, partitions=wanted)
    with pytest.raises(BrbError, match="either `contact`"):
        backfill_contact(s, "")
    with pytest.raises(BrbError, match=r"^no partition batch-999: see `brb people --partitions`$"):
        backfill_contact(s, "", partitions=["batch-999"])
