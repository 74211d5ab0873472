"""`brb mcp` through the real protocol: the official SDK's stdio client starts `brb mcp` as a
subprocess on ingested homes (real DuckDB, SQLite, Dagster ingest; the hash embedder), lists the
tools, calls each one, compares `search` with `brb search --json`, sends bad arguments (each is
a tool error with one sentence, and the server keeps answering), and serves an encrypted home.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brb_pipeline_tests.helpers.cli import ENV, brb
from brb_pipeline_tests.helpers.mcp import answer, session

QUERY = "horror movie marathon"


@pytest.fixture(scope="module")
def world(tmp_path_factory, template_homes):
    """Copies of the session's ``all-700`` and ``all-700-enc`` homes (plaintext and encrypted, the
    key copied into ``keys``)."""
    root = tmp_path_factory.mktemp("mcp")
    env = {**ENV, "BRB_ENCRYPTION": "1", "BRB_KEY_DIR": str(root / "keys")}
    env.pop("BRB_KEY", None)
    template_homes.copy("all-700", root / "plain")
    template_homes.copy("all-700-enc", root / "enc", key_dir=root / "keys")
    return {"root": root, "env": env, "plain": root / "plain", "enc": root / "enc"}


def cli_search(home: Path, env: dict, query: str, *extra: str) -> dict:
    r = brb("search", query, "--json", *extra, home=home, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_tools_answer_over_stdio_as_brb_search_does(world, tmp_path):
    home, env = world["plain"], world["env"]
    status = json.loads(brb("status", "--json", home=home, env=env).stdout)
    cli = cli_search(home, env, QUERY, "-k", "5")
    errlog = tmp_path / "stderr.txt"
    names, (found, lexical, people, st) = session(home, env, [
        ("search", {"query": QUERY, "k": 5}), ("search", {"query": QUERY, "k": 5, "mode": "lexical"}),
        ("list_people", {}), ("status", None)], errlog=errlog)
    assert names == ["search", "get_conversation", "list_people", "person", "status"]
    hits = answer(found)["hits"]
    assert [h["chunk_ids"] for h in hits] == [h["chunk_ids"] for h in cli["hits"]] and len(hits) == 5
    assert [h["score"] for h in hits] == pytest.approx([h["scores"]["fused"] for h in cli["hits"]], rel=1e-4)  # numpy vs SQL floats
    lex = cli_search(home, env, QUERY, "-k", "5", "--mode", "lexical")
    assert [h["chunk_ids"] for h in answer(lexical)["hits"]] == [h["chunk_ids"] for h in lex["hits"]]
    for hit, want in zip(hits, cli["hits"]):
        assert hit["citation"].startswith("brb:") and hit["conversation"] == want["chat_id"]
        assert hit["lines"][0]["id"] == hit["first_message_id"]
        assert hit["more_lines"] or hit["lines"][-1]["id"] == hit["last_message_id"]
        assert "Me" in hit["participants"] and all(line["sender"] and line["time"] for line in hit["lines"])
        for line in hit["lines"]:  # each line is a message of the passage brb search shows
            assert " ".join(line["text"].split())[:30] in " ".join(want["text"].split()), line
            assert (line["sender"] == "Me") == (line["sender_handle"] is None)
    people = answer(people)
    assert people["matched"] == status["people"] and len(people["people"]) == min(50, status["people"])
    st = answer(st)
    assert (st["messages"], st["chunks"], st["contacts"]) == (status["messages"], status["chunks"], status["contacts"])
    assert (st["people"], st["conversations"]) == (status["people"], status["conversations"])
    assert st["last_ingestion"]["status"] == "success" and st["memory"]["model_based_memory"] is False
    err = errlog.read_text()
    assert "Traceback" not in err and not any(line["text"][:20] in err for h in hits for line in h["lines"])


def test_reading_further_people_and_stable_citations(world):
    home, env = world["plain"], world["env"]
    _, (found, people) = session(home, env, [("search", {"query": QUERY, "k": 3}), ("list_people", {"limit": 200})])
    hit = answer(found)["hits"][0]
    direct = next(p for p in answer(people)["people"] if p["kind"] == "direct")
    _, (again, around, latest, by_time, who, sent, theirs) = session(home, env, [  # a new process: a restart
        ("search", {"query": QUERY, "k": 3}),
        ("get_conversation", {"conversation": hit["conversation"], "around": hit["last_message_id"],
                              "before": 2, "after": 1}),
        ("get_conversation", {"conversation": hit["conversation"], "before": 3, "after": 5}),
        ("get_conversation", {"conversation": hit["conversation"], "around": hit["start"], "before": 0, "after": 0}),
        ("person", {"name": direct["name"]}),
        ("search", {"query": QUERY, "k": 3, "from": "me"}),
        ("search", {"query": "what are you doing this weekend", "k": 3, "from": direct["name"]})])
    assert [h["citation"] for h in answer(again)["hits"]] == [h["citation"] for h in answer(found)["hits"]]
    around = answer(around)
    ids = [m["id"] for m in around["messages"]]
    assert around["anchor"] == hit["last_message_id"] and ids.index(hit["last_message_id"]) == 2 and len(ids) <= 4
    assert ids[:2] == [line["id"] for line in hit["lines"]][-3:-1]
    latest = answer(latest)
    assert len(latest["messages"]) == 4 and latest["more_after"] is False and latest["more_before"] is True
    assert answer(by_time)["messages"][0]["id"] == hit["first_message_id"]
    who = answer(who)
    assert who["contact_id"] == direct["contact_id"] and who["messages"] == direct["messages"]
    assert who["profile"] is None and "No distilled profile" in who["memory_note"]
    mine = answer(sent)["hits"]
    assert mine and all(any(line["sender"] == "Me" for line in h["lines"]) for h in mine)
    theirs = answer(theirs)["hits"]
    assert theirs and all(any(line["sender_handle"] in direct["handles"] for line in h["lines"]) for h in theirs)
    assert all(line["sender"] == direct["name"] for h in theirs for line in h["lines"]
               if line["sender_handle"] in direct["handles"])


BAD_CALLS = [
    ("search", {}), ("search", {"query": ""}), ("search", {"query": "x", "k": 0}), ("search", {"query": "x", "k": 51}),
    ("search", {"query": "x", "k": "ten"}), ("search", {"query": "x", "k": True}), ("search", {"query": "x" * 1001}),
    ("search", {"query": "x", "since": "last tuesday"}), ("search", {"query": "x", "mode": "fuzzy"}),
    ("search", {"query": "x", "channel": "telegram"}), ("search", {"query": "x", "contact": "Nobody Zzyzx"}),
    ("search", {"query": "x", "from": "Nobody Zzyzx"}), ("search", {"query": "x", "nonsense": 1}),
    ("search", {"query": "x", "since": "2024-05-02", "until": "2024-05-01"}),
    ("get_conversation", {"conversation": "no such chat"}), ("get_conversation", {}),
    ("get_conversation", {"conversation": "x", "before": 101}), ("list_people", {"limit": 0}),
    ("person", {"name": "Nobody Zzyzx"}), ("person", {}), ("status", {"verbose": True}), ("no_such_tool", {}),
]


def test_bad_arguments_are_one_sentence_tool_errors_and_the_server_keeps_answering(world, tmp_path):
    errlog = tmp_path / "stderr.txt"
    _, results = session(world["plain"], world["env"], [*BAD_CALLS, ("status", {})], errlog=errlog)
    for (name, args), res in zip(BAD_CALLS, results):
        text = res.content[0].text
        assert res.is_error, (name, args, text)
        assert "\n" not in text and 10 < len(text) < 300 and "Traceback" not in text, (name, args, text)
    said = {(name, json.dumps(args)): res.content[0].text for (name, args), res in zip(BAD_CALLS, results)}
    assert said[("search", '{"query": "x", "k": 0}')] == "'k' must be a whole number from 1 to 50."
    assert said[("person", '{"name": "Nobody Zzyzx"}')] == "No person or group matches 'Nobody Zzyzx': list_people shows the names."
    assert said[("search", '{"query": "x", "nonsense": 1}')].startswith("search has no argument 'nonsense'")
    assert answer(results[-1])["chunks"] > 0
    assert "Traceback" not in errlog.read_text()


def test_the_log_is_written_only_when_asked(world, tmp_path):
    home = tmp_path / "home"
    shutil.copytree(world["plain"], home)
    env = world["env"]

    def logged() -> int:
        return len(json.loads(brb("search-log", "-n", "1000", home=home, env=env).stdout))

    before = logged()
    session(home, env, [("search", {"query": QUERY})])
    assert logged() == before
    session(home, env, [("search", {"query": QUERY}), ("search", {"query": "pizza"})], "--log")
    assert logged() == before + 2


def test_an_encrypted_home_is_served_and_a_missing_key_fails_at_start(world, tmp_path):
    enc, env = world["enc"], world["env"]
    cli = cli_search(enc, env, QUERY, "-k", "3")
    _, (found, st) = session(enc, env, [("search", {"query": QUERY, "k": 3}), ("status", {})])
    hits = answer(found)["hits"]
    assert [h["chunk_ids"] for h in hits] == [h["chunk_ids"] for h in cli["hits"]] and hits[0]["lines"]
    assert answer(st)["encrypted"] is True
    no_key = {**env, "BRB_KEY_DIR": str(tmp_path / "empty")}
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "mcp", "--home", str(enc)], env=no_key,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stderr[-2000:])
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("brb: error: "), r.stderr


def test_a_missing_home_fails_at_start(tmp_path):
    r = subprocess.run([sys.executable, "-m", "brb_pipeline.cli", "mcp", "--home", str(tmp_path / "nope")], env=ENV,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"brb: error: no search store in {tmp_path / 'nope'}: run `brb ingest` (or `brb demo`) first\n"


def test_sdk_log_records_lose_their_arguments_and_exception_text():
    import io
    import logging

    from brb_pipeline.assistant.server import quiet_sdk_logs

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        quiet_sdk_logs()
        sdk = logging.getLogger("mcp.server.runner")
        sdk.warning("dropped %r: malformed params", {"query": "SECRET-TEXT of a message"})
        try:
            raise ValueError("validation failed for SECRET-TEXT of a message")
        except ValueError:
            sdk.exception("handler for %r returned an invalid result", "tools/call")
        sdk.info("Processing request with SECRET-TEXT")  # below WARNING: dropped
        logging.getLogger("brb_pipeline.assistant.tools").warning("tool %s failed: %s", "search", "KeyError")
    finally:
        root.removeHandler(handler)
    text = out.getvalue()
    assert "SECRET" not in text, text
    assert "dropped %r: malformed params" in text and "(ValueError)" in text
    assert "tool search failed: KeyError" in text  # our own records keep their arguments


def _digests(home: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("which", ["plain", "enc"])
def test_a_session_changes_no_file_of_the_home(world, which):
    home, env = world[which], world["env"]
    before = _digests(home)
    _, results = session(home, env, [("search", {"query": QUERY, "from": "me"}), ("list_people", {}),
                                     ("person", {"name": "me"}), ("status", {}), ("search", {"query": "x", "k": 0})])
    hit = answer(results[0])["hits"][0]
    session(home, env, [("get_conversation", {"conversation": hit["conversation"]}),
                        ("person", {"name": answer(results[1])["people"][0]["name"]})])
    assert _digests(home) == before
