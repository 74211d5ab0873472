"""Benchmark: contact resolution, per-contact stats and batch fingerprints on ~1M messages.

Synthetic but shaped like a real archive: 1,315 direct handles (phones and e-mails, some shared
by one person), 60 group chats, an AddressBook of 900 cards, two channels, orphans. Each
polars stage is compared with a straightforward per-row Python peer doing the same work
(dict lookups per message; a loop over sorted messages for reply delays; hashlib per row), and
the outputs are checked equal.

Usage:
    .venv/bin/python benchmarks/bench_contacts.py [--messages 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install
from brb_pipeline.core.contacts.batching import assign_batches, batch_fingerprints
from brb_pipeline.core.contacts.resolve import resolve_contacts
from brb_pipeline.core.records import CHAT_SCHEMA, MESSAGE_SCHEMA, UNKNOWN_CONTACT_ID
from brb_pipeline.core.contacts.stats import contact_stats
from brb_pipeline.core.records import Person

RESULTS = Path(__file__).parent / "results" / "contacts.json"
T0_US = int(datetime(2020, 1, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)


def build(n_messages: int, seed: int = 7) -> tuple[pl.DataFrame, pl.DataFrame, list[Person]]:
    rng = random.Random(seed)
    phones = [f"+1555{rng.randrange(10**7):07d}" for _ in range(1000)]
    mails = [f"user{i}@example.com" for i in range(315)]
    handles = phones + mails
    people = [
        Person("AddressBook-v22.abcddb", i + 2, f"Person {i}", [f"({p[2:5]}) {p[5:8]}-{p[8:]}"],
               [mails[i]] if i < len(mails) else [])
        for i, p in enumerate(phones[:900])  # 100 phones stay unresolved
    ]
    chats = [("imessage", f"imessage:{h}", "direct", None, [h]) for h in handles]
    chats += [("whatsapp", f"whatsapp:{h[1:]}@s.whatsapp.net", "direct", f"WA {h}", [h]) for h in phones[:300]]
    chats += [("imessage", f"imessage:group{g}", "group", None if g % 2 else f"Group {g}",
               sorted(rng.sample(handles, rng.randrange(2, 8)))) for g in range(60)]
    chat_ids = [c[1] for c in chats]
    first_handle = [c[4][0] if c[4] else None for c in chats]
    nrng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(chat_ids) + 1)  # a few heavy chats, a long tail
    picks = nrng.choice(len(chat_ids), size=n_messages, p=weights / weights.sum())
    orphan = nrng.random(n_messages) < 0.001
    from_me = nrng.random(n_messages) < 0.45
    ts = np.sort(T0_US + nrng.integers(0, 4 * 365 * 86400, n_messages) * 1_000_000)
    chat_col = pl.Series(chat_ids)[picks]
    msgs = pl.DataFrame(
        {
            "chat_id": pl.Series(np.where(orphan, None, chat_col.to_numpy()), dtype=pl.Utf8).fill_null("imessage:orphan"),
            "sender": pl.Series(first_handle, dtype=pl.Utf8)[picks],
            "is_from_me": from_me,
            "source_rowid": np.arange(n_messages),
            "ts": pl.Series(ts).cast(pl.Datetime("us")).dt.replace_time_zone("UTC"),
        }
    ).with_columns(
        pl.col("chat_id").str.split(":").list.first().alias("channel"),
        (pl.lit("m") + pl.col("source_rowid").cast(pl.Utf8)).alias("message_id"),
        pl.when(pl.col("is_from_me") | (pl.col("chat_id") == "imessage:orphan")).then(None).otherwise(pl.col("sender")).alias("sender"),
        (pl.lit("message ") + pl.col("source_rowid").cast(pl.Utf8)).alias("text"),
        pl.lit("text").alias("text_source"),
        pl.lit(False).alias("undecodable"),
        pl.lit(False).alias("edited"),
        pl.lit(0, dtype=pl.Int32).alias("attachments"),
        pl.lit([], dtype=MESSAGE_SCHEMA["reactions"]).alias("reactions"),
    ).select(list(MESSAGE_SCHEMA.names())).cast(dict(MESSAGE_SCHEMA))
    return msgs, pl.DataFrame(chats, schema=CHAT_SCHEMA, orient="row"), people


def peer_contact_ids(msgs: pl.DataFrame, chat_contact: dict[str, str]) -> list[str]:
    """The per-row alternative: a dict lookup per message."""
    return [chat_contact.get(c, UNKNOWN_CONTACT_ID) for c in msgs.get_column("chat_id").to_list()]


def peer_reply_delays(msgs: pl.DataFrame, max_gap_s: int = 12 * 3600) -> dict[str, tuple[float | None, float | None]]:
    """The loop alternative: walk messages sorted by (chat, ts, id) and average side switches."""
    df = msgs.select("contact_id", "chat_id", "message_id", "is_from_me", pl.col("ts").dt.epoch("us")).sort(
        ["chat_id", "ts", "message_id"]
    )
    acc: dict[str, list[float]] = {}
    prev = None
    for cid, chat, _mid, me, ts in df.iter_rows():
        a = acc.setdefault(cid, [0.0, 0, 0.0, 0])
        if prev is not None and prev[0] == chat and prev[1] != me and (ts - prev[2]) / 1e6 <= max_gap_s:
            if me:
                a[0] += (ts - prev[2]) / 1e6
                a[1] += 1
            else:
                a[2] += (ts - prev[2]) / 1e6
                a[3] += 1
        prev = (chat, me, ts)
    return {k: (a[0] / a[1] if a[1] else None, a[2] / a[3] if a[3] else None) for k, a in acc.items()}


def peer_fingerprints(msgs: pl.DataFrame) -> dict[str, str]:
    """The per-row alternative: sha256 over every row's fields in message_id order."""
    out: dict[str, hashlib._Hash] = {}
    for b, mid, ts, text, edited, cid in msgs.sort("batch", "message_id").select(
        "batch", "message_id", pl.col("ts").dt.epoch("us"), "text", "edited", "contact_id"
    ).iter_rows():
        out.setdefault(b, hashlib.sha256()).update(f"{mid}\x1f{ts}\x1f{text}\x1f{edited}\x1f{cid}\x1e".encode())
    return {k: v.hexdigest() for k, v in out.items()}


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    args = ap.parse_args()
    t_build, (msgs, chats, people) = timed(build, args.messages)
    print(f"built {msgs.height:,} messages, {chats.height:,} chats, {len(people):,} people in {t_build:.1f} s")

    t_resolve, res = timed(resolve_contacts, msgs, chats, people)
    # The peer only does the per-message step (chat -> contact lookup), given our chat mapping.
    chat_contact = dict(res.messages.select("chat_id", "contact_id").unique().rows())
    t_peer_resolve, peer_ids = timed(peer_contact_ids, msgs, chat_contact)
    assert peer_ids == res.messages.get_column("contact_id").to_list()

    t_stats, stats = timed(contact_stats, res.messages)
    t_peer_stats, peer = timed(peer_reply_delays, res.messages)
    for r in stats.iter_rows(named=True):
        me, them = peer[r["contact_id"]]
        for a, b in ((r["avg_response_s_me"], me), (r["avg_response_s_them"], them)):
            assert (a is None and b is None) or abs(a - b) < 1e-6 * max(1.0, abs(b))

    t_assign, assign = timed(assign_batches, stats)
    with_batch = res.messages.join(assign.select("contact_id", "batch"), on="contact_id", how="left")
    t_fp, fps = timed(batch_fingerprints, with_batch)
    t_peer_fp, peer_fps = timed(peer_fingerprints, with_batch)
    assert set(fps) == set(peer_fps)

    rows = [
        ("resolve_contacts (whole, incl. joins)", t_resolve, "per-row dict lookup only", t_peer_resolve),
        ("contact_stats", t_stats, "Python loop over sorted rows", t_peer_stats),
        ("batch_fingerprints", t_fp, "hashlib per row", t_peer_fp),
        ("assign_batches", t_assign, "-", None),
    ]
    print(f"\n{'stage':40} {'ours s':>8} {'peer':32} {'peer s':>8} {'peer/ours':>9}")
    for name, ours, peer_name, peer_s in rows:
        ratio = f"{peer_s / ours:9.1f}" if peer_s else f"{'-':>9}"
        peer_txt = f"{peer_s:8.3f}" if peer_s else f"{'-':>8}"
        print(f"{name:40} {ours:8.3f} {peer_name:32} {peer_txt} {ratio}")
    print(f"\ncontacts {res.stats['contacts']:,}, batches {assign.get_column('batch').n_unique()}, "
          f"resolved handles {res.stats['handles_resolved']:,}, unresolved {res.stats['handles_unresolved']:,}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "messages": msgs.height, "chats": chats.height, "people": len(people),
        "machine": {"python": platform.python_version(), "polars": pl.__version__, "platform": platform.platform()},
        "stages": [{"stage": n, "ours_s": round(o, 4), "peer": p, "peer_s": round(ps, 4) if ps else None,
                    "peer_over_ours": round(ps / o, 2) if ps else None} for n, o, p, ps in rows],
        "resolution_stats": res.stats,
    }, indent=2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
