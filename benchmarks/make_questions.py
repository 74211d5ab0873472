"""Make the retrieval question set that nobody tuned to: pick targets, hand out a worksheet, freeze.

The procedure has three steps; the first and last are this script, deterministic for a seed:

1. ``pick``: read an ingested home of the full demo archive (``brb demo --messages 0``), pick
   target messages with ``--seed`` and write a worksheet. A target is a message a person could
   remember: 6+ content words, 30-280 characters, its text unique in the archive, in a chat of
   8+ messages, at most one target per chat. Each target gets one question kind, in a fixed mix:

   * ``paraphrase``: a question that shares at most one content word with the target;
   * ``short``: a 2-4 word search-box query (also at most one shared content word);
   * ``contact``: a question that names the contact (a named 1:1 contact), otherwise a paraphrase;
   * ``exact``: a question that must contain a rare token of the target verbatim (a proper noun
     or a 3+ digit number found in at most 3 messages of the archive), where lexical search
     should win.

2. Writing: the worksheet (target text, two messages of context each side, the kind, the
   contact's name or the token) goes to a writer who has not seen brb's code and never sees the
   search results; here that was a separate agent session given only the worksheet and
   ``RULES`` below. The writer returns ``{"id": ..., "question": ...}`` lines.

3. ``freeze``: check every question against its kind's rule (content-word overlap counted on crude
   stems, scikit-learn's English stop words aside; word counts; the name or token present),
   drop the ones that break it (listed in the output), split the rest once into a dev half and a
   test half (stratified by kind, ``--seed``), and write both, frozen. Tune on dev; report test.

    .venv/bin/python benchmarks/make_questions.py pick --home ~/.brb-full --out /tmp/worksheet.json
    .venv/bin/python benchmarks/make_questions.py freeze --worksheet /tmp/worksheet.json \
        --answers /tmp/answers.jsonl --out-dir benchmarks/questions
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parents[1]

KINDS = ("paraphrase", "short", "contact", "exact")
MIX = {"paraphrase": 70, "short": 50, "contact": 45, "exact": 35}  # 200 targets
RULES = {
    "paraphrase": "Ask for this message the way its owner would, months later, remembering roughly what was "
                  "said. Share at most ONE content word with the message (stop words like 'the', 'about', "
                  "'what' do not count; different forms of a word, 'movie'/'movies', count as the same). "
                  "Do not name the contact. One sentence.",
    "short": "A 2-4 word search-box query for this message, as someone would type it. At most ONE content "
             "word shared with the message. Do not name the contact.",
    "contact": "A question that names the contact (use the name given, first name or full name) and asks "
               "for this message; apart from the name, share at most ONE content word with the message.",
    "exact": "A question or query that contains the given token verbatim (the person remembers that exact "
             "word or number) plus a few words of what it was about; up to 10 words.",
}

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_SUFFIXES = ("ing", "ed", "es", "s", "ly")


def stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    extra = {"lol", "haha", "yeah", "ok", "okay", "oh", "just", "like", "really", "did", "said", "say", "tell",
             "told", "talk", "talked", "remember", "know", "think", "thing", "things", "im", "dont", "ive",
             "thats", "don", "t", "s", "m", "ll", "re", "ve", "d"}
    return frozenset(ENGLISH_STOP_WORDS | extra)


def stem(word: str) -> str:
    """A crude stem: lowercase, one common suffix off (only when 3+ letters remain), then a final
    ``e`` (so love/loving/loved and movie/movies meet)."""
    w = word.lower()
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            break
    return w[:-1] if w.endswith("e") and len(w) > 3 else w


def content_stems(text: str, stops: frozenset[str]) -> set[str]:
    return {stem(w) for w in _WORD.findall(text.lower()) if w not in stops and not w.isdigit() and len(w) > 1}


def shared_content(question: str, target: str, stops: frozenset[str], ignore: Iterable[str] = ()) -> set[str]:
    """Content stems the question shares with the target (``ignore``: words allowed, e.g. the name)."""
    skip = {stem(w) for x in ignore for w in _WORD.findall(x.lower())}
    return (content_stems(question, stops) & content_stems(target, stops)) - skip


# ----------------------------------------------------------------------------- pick


def _rare_tokens(text: str, df: Mapping[str, int]) -> list[str]:
    """Proper nouns (capitalized, not sentence-initial, 4+ letters) and 3+ digit numbers found in
    at most 3 messages."""
    out = []
    for m in re.finditer(r"[^\W_]+", text):
        tok = m.group(0)
        before = text[: m.start()].rstrip()
        initial = not before or before[-1] in ".!?"
        proper = tok[:1].isupper() and tok[1:].islower() and len(tok) >= 4 and tok.isalpha() and not initial
        number = tok.isdigit() and len(tok) >= 3
        if (proper or number) and df.get(tok.lower(), 0) <= 3:
            out.append(tok)
    return out


def pick(home: Path, seed: int, mix: Mapping[str, int] = MIX) -> dict[str, Any]:
    """The worksheet for an ingested home: targets, kinds and the writer's material."""
    stops = stop_words()
    msgs = pl.read_parquet(home / "staging" / "messages.parquet",
                           columns=["message_id", "chat_id", "contact_id", "is_from_me", "ts", "text"])
    msgs = msgs.filter(pl.col("text").is_not_null()).sort(["contact_id", "chat_id", "ts", "message_id"])
    con = sqlite3.connect(f"file:{home / 'brb.db'}?mode=ro", uri=True)
    try:
        names = {cid: (name, src, kind) for cid, name, src, kind in
                 con.execute("SELECT contact_id, display_name, name_source, kind FROM contacts")}
    finally:
        con.close()
    df: Counter[str] = Counter()
    for text in msgs["text"]:
        df.update({w.lower() for w in _WORD.findall(text)})
    text_counts = Counter(msgs["text"])
    chat_sizes = Counter(msgs["chat_id"])
    rows = msgs.to_dicts()
    by_chat: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_chat.setdefault(r["chat_id"], []).append(i)
    pos_in_chat = {i: (r["chat_id"], n) for chat, idx in by_chat.items() for n, i in enumerate(idx) for r in [rows[i]]}

    def eligible(r: Mapping[str, Any]) -> bool:
        t = r["text"].strip()
        return (30 <= len(t) <= 280 and text_counts[r["text"]] == 1 and chat_sizes[r["chat_id"]] >= 8
                and len(content_stems(t, stops)) >= 6)

    rng = random.Random(seed)
    order = [i for i, r in enumerate(rows) if eligible(r)]
    rng.shuffle(order)
    need = dict(mix)
    used_chats: set[str] = set()
    items = []
    for i in order:
        if not any(need.values()):
            break
        r = rows[i]
        if r["chat_id"] in used_chats:
            continue
        name, src, ckind = names.get(r["contact_id"], (None, None, None))
        tokens = _rare_tokens(r["text"], df)
        # A kind this target can take, in a fixed preference so the mix fills deterministically.
        kind = None
        if need["exact"] and tokens:
            kind = "exact"
        elif need["contact"] and src == "addressbook" and ckind == "direct":
            kind = "contact"
        elif need["short"] and rng.random() < 0.45:
            kind = "short"
        elif need["paraphrase"]:
            kind = "paraphrase"
        elif need["short"]:
            kind = "short"
        if kind is None:
            continue
        need[kind] -= 1
        used_chats.add(r["chat_id"])
        chat, n = pos_in_chat[i]
        idx = by_chat[chat]
        ctx = [rows[j] for j in idx[max(0, n - 2): n + 3]]
        item = {
            "id": f"q{len(items) + 1:03d}",
            "kind": kind,
            "target": {"ts": r["ts"].isoformat(), "text": r["text"], "from_me": bool(r["is_from_me"])},
            "context": [{"from": "me" if c["is_from_me"] else "them", "text": c["text"],
                         "target": c["message_id"] == r["message_id"]} for c in ctx],
        }
        if kind == "contact":
            item["contact"] = name
        if kind == "exact":
            item["token"] = rng.choice(tokens)
        items.append(item)
    return {"name": "retrieval_questions", "seed": seed, "home_messages": msgs.height, "mix": dict(mix),
            "rules": RULES, "items": items}


# ----------------------------------------------------------------------------- freeze


def check(item: Mapping[str, Any], question: str, stops: frozenset[str]) -> str | None:
    """Why ``question`` breaks its kind's rule, or None when it keeps it."""
    q = question.strip()
    if not q:
        return "empty"
    target = item["target"]["text"]
    kind = item["kind"]
    if kind == "exact":
        if item["token"].lower() not in q.lower():
            return f"token {item['token']!r} missing"
        return None
    ignore: list[str] = []
    if kind == "contact":
        name = item["contact"]
        parts = [p for p in _WORD.findall(name.lower()) if len(p) > 1]
        if not any(re.search(rf"\b{re.escape(p)}\b", q.lower()) for p in parts):
            return f"contact {name!r} not named"
        ignore = [name]
    shared = shared_content(q, target, stops, ignore)
    if len(shared) > 1:
        return f"shares {len(shared)} content words: {', '.join(sorted(shared))}"
    if kind == "short" and not 2 <= len(q.split()) <= 4:
        return f"{len(q.split())} words"
    return None


def split(items: Sequence[Mapping[str, Any]], seed: int) -> tuple[list[dict], list[dict]]:
    """Dev and test halves, stratified by kind (odd counts give the extra one to test)."""
    rng = random.Random(seed)
    dev, test = [], []
    for kind in KINDS:
        group = [dict(x) for x in items if x["kind"] == kind]
        rng.shuffle(group)
        half = len(group) // 2
        dev += group[:half]
        test += group[half:]
    return sorted(dev, key=lambda x: x["id"]), sorted(test, key=lambda x: x["id"])


def freeze(worksheet: Mapping[str, Any], answers: Mapping[str, str], seed: int) -> dict[str, Any]:
    stops = stop_words()
    kept, dropped = [], []
    for item in worksheet["items"]:
        q = answers.get(item["id"])
        why = "no answer" if q is None else check(item, q, stops)
        if why:
            dropped.append({"id": item["id"], "kind": item["kind"], "question": q, "why": why})
            continue
        out = {"id": item["id"], "kind": item["kind"], "question": q.strip(),
               "targets": [{"ts": item["target"]["ts"], "text": item["target"]["text"][:60]}]}
        for key in ("contact", "token"):
            if key in item:
                out[key] = item[key]
        kept.append(out)
    dev, test = split(kept, seed)
    return {"dev": dev, "test": test, "dropped": dropped}


def _header(worksheet: Mapping[str, Any], half: str, seed: int) -> dict[str, Any]:
    return {"name": f"retrieval_{half}", "half": half, "archive": {"builder": "brb demo --messages 0", "seed": 7,
            "messages": worksheet["home_messages"]}, "pick_seed": worksheet["seed"], "split_seed": seed,
            "how_made": " ".join(__doc__.split("    .venv/bin/python")[0].split()), "rules": worksheet["rules"]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pick")
    p.add_argument("--home", type=Path, required=True)
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--out", type=Path, required=True)
    f = sub.add_parser("freeze")
    f.add_argument("--worksheet", type=Path, required=True)
    f.add_argument("--answers", type=Path, required=True, help="JSON lines of {id, question}")
    f.add_argument("--seed", type=int, default=1201)
    f.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "questions")
    args = ap.parse_args(argv)
    if args.cmd == "pick":
        ws = pick(args.home, args.seed)
        args.out.write_text(json.dumps(ws, indent=1, ensure_ascii=False, default=str))
        print(f"{len(ws['items'])} targets -> {args.out}: {Counter(x['kind'] for x in ws['items'])}")
        return 0
    ws = json.loads(args.worksheet.read_text(encoding="utf-8"))
    answers = {}
    for line in args.answers.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            answers[row["id"]] = row["question"]
    res = freeze(ws, answers, args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for half in ("dev", "test"):
        doc = {**_header(ws, half, args.seed), "questions": res[half]}
        (args.out_dir / f"retrieval_{half}.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False))
    (args.out_dir / "retrieval_dropped.json").write_text(json.dumps(res["dropped"], indent=1, ensure_ascii=False))
    print(f"dev {len(res['dev'])}, test {len(res['test'])}, dropped {len(res['dropped'])}")
    for d in res["dropped"]:
        print(f"  dropped {d['id']} ({d['kind']}): {d['why']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
