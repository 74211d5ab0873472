"""Progress for a host app: counts, rate and ETA per stage, the contact being processed, and the
pipeline's warnings as JSON log lines; then a real `brb ingest --progress jsonl` (hash embedder).
"""

import io
import json
import logging
import sqlite3
import subprocess
import sys
import threading

import pytest

from brb_pipeline.core import metadata
from brb_pipeline.core.progress import JsonlSink, Progress, bar_text, eta_text
from brb_pipeline.demo.generate import build_demo_archive

ENV_KEYS = {"BRB_EMBEDDING_MODEL": "hash", "BRB_HDBSCAN_MIN_CLUSTER_SIZE": "8", "PYTHONUNBUFFERED": "1"}


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class ContactSink:
    takes_current_contact = True

    def __init__(self) -> None:
        self.lines: list[tuple] = []
        self.logs: list[tuple] = []

    def stage(self, stage, percent, message, stats, current_contact=None):
        self.lines.append((stage, percent, dict(stats), current_contact))

    def log(self, level, message):
        self.logs.append((level, message))


class PlainSink:
    """A sink written before current_contact existed: four arguments only."""

    def __init__(self) -> None:
        self.lines: list[tuple] = []
        self.logs: list[tuple] = []

    def stage(self, stage, percent, message, stats):
        self.lines.append((stage, percent, dict(stats)))

    def log(self, level, message):
        self.logs.append((level, message))


# Rate and ETA --------------------------------------------------------------------------------

def test_rate_and_eta_from_count_and_percent():
    clock, sink, plain = Clock(), ContactSink(), PlainSink()
    p = Progress([sink, plain], clock=clock)
    p.update("embedding", 0, "b0 0/2000", current_contact="Ayşe", count=0, unit="chunks")
    clock.t = 100.5
    p.update("embedding", 10, count=200, unit="chunks")  # under MIN_RATE_S: no rate yet
    clock.t = 102.0
    p.update("embedding", 25, count=500, unit="chunks", chunks_done=500, chunks_total=2000)
    clock.t = 104.0
    p.update("embedding", 20, count=1000, unit="chunks")  # percent never goes back: stays 25
    clock.t = 105.0
    p.update("embedding", 50, count=1250, unit="chunks")
    clock.t = 106.0
    p.update("embedding", 100, count=1600, unit="chunks")
    stats = [line[2] for line in sink.lines]
    assert stats[0] == {"elapsed_s": 0.0}
    assert stats[1] == {"elapsed_s": 0.5}
    # 500 chunks in 2 s; 25% in 2 s leaves 75% = 6 s
    assert stats[2] == {"chunks_done": 500, "chunks_total": 2000, "elapsed_s": 2.0,
                        "rate_per_s": 250.0, "rate_unit": "chunks", "eta_s": 6.0}
    assert sink.lines[3][1] == 25 and stats[3]["eta_s"] == 12.0  # 25% in 4 s
    assert stats[4]["rate_per_s"] == 250.0 and stats[4]["eta_s"] == 5.0  # 50% in 5 s
    assert stats[5]["eta_s"] == 0.0 and stats[5]["rate_per_s"] == round(1600 / 6, 1)
    assert sink.lines[0][3] == "Ayşe" and sink.lines[1][3] is None
    # the four-argument sink gets the same stats and no current_contact
    assert [line[2] for line in plain.lines] == stats


def test_stage_without_count_has_no_rate_or_eta_and_stages_are_timed_apart():
    clock, sink = Clock(), ContactSink()
    p = Progress([sink], clock=clock)
    p.update("parsing", 0, count=0, unit="messages")
    clock.t = 110.0
    p.update("saving", 5, "loading partitions")
    clock.t = 113.0
    p.update("saving", 80, "HNSW ready")
    p.update("parsing", 50, count=5000, unit="messages")
    assert sink.lines[2][2] == {"elapsed_s": 3.0}  # saving: timed from its own first update
    assert sink.lines[3][2] == {"elapsed_s": 13.0, "rate_per_s": 384.6, "rate_unit": "messages", "eta_s": 13.0}


def test_counting_that_starts_late_is_measured_from_its_first_count():
    clock, sink = Clock(), ContactSink()
    p = Progress([sink], clock=clock)
    p.update("embedding", 10, "waiting")
    clock.t = 150.0
    p.update("embedding", 20, count=0, unit="chunks")
    clock.t = 152.0
    p.update("embedding", 60, count=100, unit="chunks")
    # 40% in the 2 s since counting began, not 50% in 52 s
    assert sink.lines[2][2] == {"elapsed_s": 2.0, "rate_per_s": 50.0, "rate_unit": "chunks", "eta_s": 2.0}


def test_bar_text_and_eta_text():
    assert eta_text(42.4) == "42s" and eta_text(95) == "1m35s" and eta_text(3725) == "1h02m"
    assert bar_text("b0 512/2048 chunks", {"elapsed_s": 1.0}) == "b0 512/2048 chunks"
    assert (bar_text("b0 512/2048 chunks", {"rate_per_s": 1234.5, "rate_unit": "chunks", "eta_s": 95.0})
            == "b0 512/2048 chunks - 1,234 chunks/s - ETA 1m35s")
    assert bar_text("done", {"rate_per_s": 3.0, "rate_unit": "chunks", "eta_s": 0.0}) == "done - 3 chunks/s"


def test_jsonl_stage_line_is_additive():
    out = io.StringIO()
    Progress([JsonlSink(out)], clock=Clock()).update("chunking", 12.345, "top-01 (1/3)",
                                                    current_contact="top-01", count=0, unit="messages",
                                                    batches_done=0, batches_total=3)
    assert json.loads(out.getvalue()) == {
        "type": "stage_progress", "stage": "chunking", "percent": 12.3, "message": "top-01 (1/3)",
        "stats": {"batches_done": 0, "batches_total": 3, "elapsed_s": 0.0}, "current_contact": "top-01"}


# Python logging warnings ---------------------------------------------------------------------

def test_brb_logger_warnings_reach_json_lines_only_while_forwarded():
    out, plain = io.StringIO(), PlainSink()
    p = Progress([JsonlSink(out), plain])
    stop = p.forward_logs()
    try:
        logging.getLogger("brb").warning("Parsing - %s", "iMessage - 2 messages with no chat")
        t = threading.Thread(target=lambda: logging.getLogger("brb_pipeline.sources.addressbook").error("AB - x"))
        t.start()
        t.join()
        logging.getLogger("brb").info("an info line stays out")
        logging.getLogger("dagster").warning("another library's warning stays out")
        p.log("warning", "check x failed")  # the pipeline's own log lines go to every sink
    finally:
        stop()
    logging.getLogger("brb").warning("after the run")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [
        {"type": "log", "level": "warning", "message": "Parsing - iMessage - 2 messages with no chat"},
        {"type": "log", "level": "error", "message": "AB - x"},
        {"type": "log", "level": "warning", "message": "check x failed"},
    ]
    # a terminal sink already sees logging on stderr: it gets only the pipeline's own line
    assert plain.logs == [("warning", "check x failed")]


# A real run ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def jsonl_run(tmp_path_factory):
    import os

    archive = build_demo_archive(tmp_path_factory.mktemp("progress_archive"), messages=500, seed=16)
    home = tmp_path_factory.mktemp("progress_home")
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "ingest", "--chat-db", str(archive.chat_db),
                        "--addressbook", str(archive.addressbook_dir), "--progress", "jsonl", "--no-insights",
                        "--home", str(home)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, **ENV_KEYS},
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    return archive, home, r


def test_jsonl_embedding_lines_carry_counts_and_the_contact(jsonl_run):
    archive, home, r = jsonl_run
    msgs = [json.loads(line) for line in r.stdout.splitlines()]
    stages = [m for m in msgs if m["type"] == "stage_progress"]
    assert all("current_contact" in m and "elapsed_s" in m["stats"] for m in stages)
    names = set(metadata.read_contacts(home / "brb.db")["display_name"].drop_nulls().to_list())
    batches = {b["batch"] for b in metadata.all_batches(home / "brb.db")}
    emb = [m for m in stages if m["stage"] == "embedding"]
    per_batch = [m for m in emb if "chunks_total" in m["stats"]]
    assert per_batch, emb
    for m in per_batch:
        st = m["stats"]
        assert 0 <= st["chunks_done"] <= st["chunks_total"]
        assert 0 <= st["batches_done"] <= st["batches_total"] == len(batches)
        assert 0 <= st["contacts_done"] <= st["contacts_total"]
        assert st["batch"] in batches and st["chunks_embedded"] >= st["chunks_done"]
        assert m["current_contact"] in names | batches
    assert any(m["current_contact"] in names for m in per_batch)  # a person, not only batch keys
    assert max(m["stats"]["chunks_total"] for m in per_batch) > 0
    last = emb[-1]["stats"]
    assert emb[-1]["percent"] == 100 and last["batches_done"] == last["batches_total"] and last["eta_s"] == 0.0
    assert last["contacts_done"] == last["contacts_total"] > 0
    chunking = [m["stats"] for m in stages if m["stage"] == "chunking"]
    assert all(s["messages_done"] <= s["messages_total"] for s in chunking)
    assert chunking[-1]["batches_done"] == len(batches)
    parsing = [m["stats"] for m in stages if m["stage"] == "parsing"]
    assert parsing and all(s["messages_done"] <= s["messages_total"] for s in parsing)
    percents = [m["percent"] for m in emb]
    assert percents == sorted(percents)


def test_jsonl_run_sends_pipeline_warnings_as_log_lines_and_no_message_text(jsonl_run):
    archive, home, r = jsonl_run
    msgs = [json.loads(line) for line in r.stdout.splitlines()]
    warnings = [m["message"] for m in msgs if m["type"] == "log" and m["level"] == "warning"]
    # the demo archive has messages whose chat is gone: run_parse logs it on the "brb" logger
    assert any(w.startswith("Parsing - iMessage - ") and "messages with no chat" in w for w in warnings), warnings
    assert "messages with no chat" in r.stderr  # still on stderr too
    con = sqlite3.connect(f"file:{archive.chat_db}?mode=ro", uri=True)
    texts = [t for (t,) in con.execute("SELECT text FROM message WHERE length(text) >= 16")]
    con.close()
    assert len(texts) > 100
    shown = [s for m in msgs if m["type"] != "result" for s in _strings(m)]
    assert any(s in names_of(home) for s in shown)  # names do appear (the check below can see text)
    leaked = [t for t in texts if any(t in s for s in shown)]
    assert leaked == []


def names_of(home):
    return set(metadata.read_contacts(home / "brb.db")["display_name"].drop_nulls().to_list())


def _strings(obj):
    """Every string value in a decoded JSON object."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
