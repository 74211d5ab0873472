"""Distilled memory: parsing with recovery and per-field fallback, language, prompts, profiles,
the skip without a model, and a demo ingestion with a tiny random-weight mlx-lm model."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import dagster as dg
import polars as pl
import pytest

from brb_pipeline.cli.output import status_dict
from brb_pipeline.core.embedding.models import HashEmbedder
from brb_pipeline.core.memory.generate import MLXGenerator, ScriptedGenerator
from brb_pipeline.core.memory.language import detect_language
from brb_pipeline.core.memory.parse import Losses, parse_reply, split_objects
from brb_pipeline.core.memory.profile import commitments, derive_profiles
from brb_pipeline.core.memory.prompts import TEMPLATES, build_prompt
from brb_pipeline.core.memory.topics import TOPIC_SCHEMA, distill, is_glue
from brb_pipeline.core.store import duck
from brb_pipeline.demo.generate import build_demo_archive
from brb_pipeline.stages.memory import NO_MODEL
from brb_pipeline.orchestration.instance import instance_for
from brb_pipeline.orchestration.runner import run_ingest
from brb_pipeline.config.settings import Settings
from brb_pipeline_tests.helpers.tiny_model import tiny_model as _tiny_model

THREE = ('Sure! [{"label": "Contract decision", "summary": "They agreed to sign the contract.", '
         '"first_message": 1, "last_message": 2}, {"label": "Konser planı", "summary": "Cuma günü konsere '
         'gidiyorlar, biletler {alındı}.", "first_message": 3, "last_message": 4}, {"label": "Escaped \\"q\\"", '
         '"summary": "Diego promised to send the photos by 2024-05-03.", "first_message": 5, "last_message": 6}]')


def test_cut_at_every_byte_keeps_every_complete_object():
    data = THREE.encode()
    _, _, cut_full, _ = split_objects(THREE)
    assert not cut_full
    ends = []  # byte offset just past each object's closing brace
    depth, in_str, esc = 0, False, False
    for i, ch in enumerate(THREE):
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"' and depth:
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                ends.append(len(THREE[:i + 1].encode()))
    assert len(ends) == 3
    for cut in range(len(data) + 1):
        losses = Losses()
        got = parse_reply(data[:cut].decode("utf-8", "ignore"), 6, losses)
        complete = sum(e <= cut for e in ends)
        assert len(got) == complete, cut
        if cut < len(data) and "[" in data[:cut].decode("utf-8", "ignore"):
            assert losses.truncated_replies == 1
            inside = any(s < cut < e for s, e in zip([data.index(b"{", e0) for e0 in [0, *ends[:2]]], ends))
            assert losses.objects_lost == int(inside), cut
    full = parse_reply(THREE, 6, Losses())
    assert [t.label for t in full] == ["Contract decision", "Konser planı", 'Escaped "q"']
    assert "{alındı}" in full[1].summary


def test_each_field_falls_back_on_its_own():
    reply = ('[{"label": 42, "summary": "They planned the trip to Izmir together.", "first_message": "x", '
             '"last_message": 3}, {"label": "Rent", "summary": "", "first_message": 2, "last_message": 99}, '
             '{"label": "Broken", "summary": "Talked about the \\q bad escape", "first_message": 4, '
             '"last_message": 1,}, {"label": "", "summary": null}]')
    losses = Losses()
    got = parse_reply(reply, 5, losses)
    assert [(t.label, t.first, t.last) for t in got] == [
        ("They planned the trip to", 1, 3), ("Rent", 2, 5), ("Broken", 1, 4)]
    assert got[1].summary == "Rent"
    # label and first_message of #1; summary and last_message of #2; #3 is not JSON (trailing
    # comma, bad escape): label and numbers decoded from the text, its summary fell back
    assert losses.fields_fallen_back == 5
    assert losses.objects_lost == 1 and losses.truncated_replies == 0
    losses = Losses()
    assert parse_reply("I cannot help with that.", 5, losses) == [] and losses.batches_failed == 1
    assert parse_reply("[]", 5, losses) == [] and losses.batches_failed == 1


LABELLED = [
    ("en", ["hey are you coming to the party tonight?", "yes I will be there at 8, what should I bring"]),
    ("en", ["did you send the invoice to the client", "not yet, I will do it tomorrow morning"]),
    ("tr", ["akşam yemeğe geliyor musun?", "evet geliyorum ama biraz geç kalabilirim"]),
    ("tr", ["toplantı saat kaçta", "ikide, proje için sunumu hazırladın mı"]),
    ("es", ["hola, ¿qué tal el viaje?", "muy bien, la playa es preciosa y el hotel también"]),
    ("es", ["¿vienes a la cena del sábado?", "sí, pero llego un poco tarde por el trabajo"]),
    ("de", ["kommst du heute abend mit ins kino?", "ja, ich bin um acht da, aber ich habe noch keine karte"]),
    ("de", ["hast du die rechnung schon bezahlt", "nein, das mache ich morgen früh"]),
    ("fr", ["tu viens ce soir au restaurant ?", "oui, mais je serai un peu en retard, c'est bien"]),
    ("fr", ["est-ce que tu as reçu le colis", "non pas encore, je vais appeler la poste demain"]),
    ("pt", ["você vem para o jantar hoje?", "sim, muito obrigado pelo convite, está tudo bem"]),
    ("it", ["ciao, come va il lavoro?", "bene grazie, anche se sono molto stanco"]),
]


def test_language_detection_on_a_labelled_sample():
    right = sum(detect_language(texts) == lang for lang, texts in LABELLED)
    assert right == len(LABELLED)
    assert detect_language(["👍", "", None]) == "en"


def test_prompts_are_written_in_the_detected_language():
    lines = [(False, "yarın sabah toplantı var mı"), (True, "evet, saat onda ve proje için")]
    lang = detect_language([t for _, t in lines])
    prompt = build_prompt(lang, lines)
    assert lang == "tr" and prompt.startswith(TEMPLATES["tr"].instructions.format(n=2)[:40])
    assert "[1] O: yarın" in prompt and "[2] Ben: evet" in prompt
    assert build_prompt("it", lines).startswith("Below are 2 numbered")  # no Italian template: English


def _msgs(contact: str, texts: list[str], start: datetime) -> pl.DataFrame:
    return pl.DataFrame({
        "contact_id": [contact] * len(texts), "message_id": [f"imessage:{contact}-{i}" for i in range(len(texts))],
        "chat_id": [f"imessage:chat-{contact}"] * len(texts),
        "ts": [start + timedelta(hours=i) for i in range(len(texts))],
        "text": texts, "is_from_me": [i % 2 == 0 for i in range(len(texts))],
    }, schema_overrides={"ts": pl.Datetime("us", "UTC")})


def test_distill_maps_spans_skips_glue_and_counts_failures():
    jan = datetime(2024, 1, 5, tzinfo=timezone.utc)
    msgs = pl.concat([
        _msgs("c1", ["can you review the contract", "yes, I will send comments on friday", "thanks"], jan),
        _msgs("c1", ["hi", "hey!", "ok 👍", "thanks"], jan + timedelta(days=40)),  # February: only greetings
        _msgs("c2", ["hola, ¿vamos al concierto el viernes?", "sí, compro las entradas"], jan),
    ])
    gen = ScriptedGenerator([
        '[{"label": "Contract review", "summary": "Me asked for a review; they promised to send comments on '
        'Friday.", "first_message": 1, "last_message": 2}]',
        RuntimeError("model crashed"),
    ])
    out = distill(msgs, "b1", gen)
    assert len(gen.prompts) == 2  # the greetings month never reached the model
    assert out.glue_windows == 1 and out.windows == 3 and out.languages == {"en": 2, "es": 1}
    assert "Abajo hay 2 mensajes" in gen.prompts[1]
    row = out.topics.row(0, named=True)
    assert (row["contact_id"], row["month"], row["first_message_id"], row["last_message_id"]) == (
        "c1", "2024-01", "imessage:c1-0", "imessage:c1-1")
    assert row["last_ts"] - row["first_ts"] == timedelta(hours=1)
    assert out.losses.batches_failed == 1
    assert is_glue("ok 👍") and not is_glue("ok, the flight is at 6")


def test_profiles_come_from_each_persons_topics_and_only_explicit_promises():
    assert commitments(["They talked about maybe going to Rome someday.", "She might call."]) == []
    got = commitments(["They met. Diego promised to send the photos by 2024-05-03.",
                       "Ana agreed to pay the rent. Nothing else."])
    assert got == [{"text": "Diego promised to send the photos by 2024-05-03.", "date": "2024-05-03"},
                   {"text": "Ana agreed to pay the rent.", "date": None}]
    topics = pl.DataFrame([
        {"topic_id": "t1", "contact_id": "c1", "batch": "b", "month": "2024-01", "label": "Project deadline",
         "summary": "The client meeting moved; he promised to send the contract on Monday.",
         "first_ts": datetime(2024, 1, 1, tzinfo=timezone.utc)},
        {"topic_id": "t2", "contact_id": "c1", "batch": "b", "month": "2024-02", "label": "project deadline",
         "summary": "The project team planned the next meeting.", "first_ts": datetime(2024, 2, 1, tzinfo=timezone.utc)},
        {"topic_id": "t3", "contact_id": "c2", "batch": "b", "month": "2024-01", "label": "Mom's birthday",
         "summary": "Thanks for the family dinner.", "first_ts": datetime(2024, 1, 2, tzinfo=timezone.utc)},
    ], schema_overrides={k: v for k, v in TOPIC_SCHEMA.items() if k in ("first_ts",)})
    prof = {r["contact_id"]: r for r in derive_profiles(topics, ["c1", "c2", "c3"], "m").iter_rows(named=True)}
    assert prof["c1"]["relationship"] == "work" and prof["c1"]["recurring_topics"] == ["project deadline"]
    assert json.loads(prof["c1"]["commitments"])[0]["date"] == "Monday"
    assert prof["c2"]["relationship"] == "family" and json.loads(prof["c2"]["commitments"]) == []
    assert prof["c3"]["n_topics"] == 0 and prof["c3"]["relationship"] == "unknown"


class Counting:
    """Wraps a generator and counts its calls."""

    def __init__(self, inner):
        self.inner, self.model_id, self.calls = inner, inner.model_id, 0

    def __call__(self, prompt: str) -> str:
        self.calls += 1
        return self.inner(prompt)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory")
    archive = build_demo_archive(root / "archive", messages=400, seed=5)
    s = Settings.load(root / "home", chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                      embedding_model="hash")
    return root, s


def _latest_meta(s, asset: str) -> dict:
    ev = instance_for(s).get_latest_materialization_event(dg.AssetKey(asset))
    return {k: getattr(v, "value", v) for k, v in ev.asset_materialization.metadata.items()}


def test_without_a_model_the_skip_is_visible_everywhere(demo):
    _, s = demo
    res = run_ingest(s, embedder=HashEmbedder(), analyze=False)
    assert res["memory"]["skipped"] is True and res["memory"]["reason"] == NO_MODEL
    for asset in ("batch_topics", "person_profiles"):
        meta = _latest_meta(s, asset)
        assert meta["skipped"] is True and meta["reason"] == NO_MODEL
    st = status_dict(s)["memory"]
    assert st["skipped"] is True and st["reason"] == NO_MODEL and st["topics"] == 0
    con = duck.connect(s.duckdb_path, read_only=True)
    try:  # the tables exist, empty, so readers never miss them
        assert con.execute("SELECT count(*) FROM topics").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM profiles").fetchone()[0] == 0
    finally:
        con.close()


@pytest.mark.slow  # e2e: two `brb demo` ingests with a model
def test_demo_ingest_with_a_tiny_model_then_nothing_changed(demo):
    root, s = demo
    path = _tiny_model(root / "tiny", None)
    s = Settings.load(s.home, llm_model_path=path, llm_max_tokens=6)
    gen = Counting(MLXGenerator(path, max_tokens=6))
    res = run_ingest(s, embedder=HashEmbedder(), analyze=False, generator=gen)
    assert res["batches_processed"] == [] and gen.calls > 0  # only the memory ran for every batch
    mem = res["memory"]
    assert mem["skipped"] is False and mem["profiles_written"] > 0
    lost = mem["losses"]
    # random weights emit numbers and punctuation: every prompt's reply is a topic or a counted loss
    assert mem["topics_written"] + lost["batches_failed"] + lost["truncated_replies"] >= 1
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        profiled = {c for (c,) in con.execute("SELECT contact_id FROM profiles").fetchall()}
        model_ids = con.execute("SELECT DISTINCT model_id, prompt_version FROM profiles").fetchall()
    finally:
        con.close()
    msgs = pl.read_parquet(s.staging_dir / "messages.parquet")
    with_text = set(msgs.filter(pl.col("text").is_not_null() & pl.col("ts").is_not_null())["contact_id"].to_list())
    assert with_text and with_text <= profiled
    assert model_ids == [(gen.model_id, 1)]
    st = status_dict(s)["memory"]
    assert st["skipped"] is False and st["profiles"] == len(profiled) and st["losses"] == lost
    calls = gen.calls
    again = run_ingest(s, embedder=HashEmbedder(), analyze=False, generator=gen)
    assert gen.calls == calls and again["memory"]["topics_written"] == 0
    assert again["store_changed"] is False
    # forget one person: their profile leaves the store and every staged memory file
    from brb_pipeline.privacy.forget import forget_contacts

    gone = sorted(c for c in profiled if c.startswith("c:"))[0]
    forget_contacts(s, [gone])
    con = duck.connect(s.duckdb_path, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM profiles WHERE contact_id = ?", [gone]).fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM topics WHERE contact_id = ?", [gone]).fetchone()[0] == 0
        left = {c for (c,) in con.execute("SELECT contact_id FROM profiles").fetchall()}
        # the others keep theirs (the unknown bucket and groups that held their lines go with them,
        # as their chunks do, until the next ingestion re-derives them without the person)
        assert left and left <= profiled - {gone}
        assert {c for c in profiled if c.startswith("c:")} - {gone} <= left
    finally:
        con.close()
    for files in s.paths.staged_batch_files().values():
        for f in files:
            if f.parent.name in ("topics", "profiles"):
                assert gone not in pl.read_parquet(f)["contact_id"].to_list(), f
