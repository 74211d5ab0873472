"""The person the privacy tests forget from a demo home, and the strings that must vanish with them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import polars as pl

from brb_pipeline.sources.imessage import read_imessage


def pick_person(home: Path, archive) -> dict:
    """The busiest named person who has a direct chat and writes in a group chat."""
    msgs = read_imessage(archive.chat_db).messages
    group_senders = set(msgs.filter(pl.col("chat_id").str.contains(";+;", literal=True)
                                    & (pl.col("text").str.len_chars() >= 16))
                        .group_by("sender").len().filter(pl.col("len") >= 2)["sender"].drop_nulls().to_list())
    con = sqlite3.connect(home / "brb.db")
    rows = con.execute("SELECT contact_id, display_name, kind, handles_json FROM contacts ORDER BY rank").fetchall()
    con.close()
    for cid, name, kind, handles in rows:
        hs = json.loads(handles)
        if kind == "direct" and cid.startswith("c:") and set(hs) & group_senders:
            return {"contact_id": cid, "name": name, "handles": sorted(hs)}
    raise AssertionError("the demo archive has no named person writing in a group chat")


def needles(archive, person: dict) -> list[str]:
    """Name, handles in the forms stored, and distinctive texts: three of the direct chat and
    two of their lines in group chats, each found in no message that is kept."""
    msgs = read_imessage(archive.chat_db).messages.filter(pl.col("text").str.len_chars() >= 16)
    handles = person["handles"]
    direct = msgs.filter(pl.col("chat_id").str.ends_with(";-;" + handles[0]))
    in_groups = msgs.filter(pl.col("sender").is_in(handles) & pl.col("chat_id").str.contains(";+;", literal=True))
    kept = msgs.filter(~pl.col("chat_id").str.ends_with(";-;" + handles[0]) & ~pl.col("sender").fill_null("").is_in(handles))
    kept_text = "\n".join(kept["text"].to_list()).lower()

    def distinctive(frame: pl.DataFrame, n: int) -> list[str]:
        out = [t for t in frame.sort(pl.col("text").str.len_chars(), descending=True)["text"].to_list()
               if t.lower() not in kept_text][:n]
        assert len(out) == n, "not enough distinctive texts"
        return out

    phones = []
    for h in handles:
        if h.startswith("+1") and len(h) == 12:  # the forms a US number is typed in
            d = h[2:]
            phones += [h, d, f"{d[:3]}-{d[3:6]}-{d[6:]}", f"({d[:3]}) {d[3:6]}-{d[6:]}"]
        else:
            phones.append(h)
    return [person["name"], *phones, *distinctive(direct, 3), *distinctive(in_groups, 2)]
