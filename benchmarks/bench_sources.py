"""Benchmark: reading a demo archive's sources, messages/s per stage, with a naive peer.

Builds a demo archive (real Apple schemas, chitchat corpus), then times the stages that turn it
into contact-resolved messages: `read_imessage` (incl. typedstream decoding of attributedBody),
`read_addressbook`, `resolve_contacts`, `contact_stats`. The peer reads the same chat.db the way
many scripts do: one `SELECT ... JOIN` per message row in Python, decoding attributedBody with
pytypedstream; it runs on a subset and its rate is compared per message.

Usage:
    .venv/bin/python benchmarks/bench_sources.py [--messages 100000] [--peer-rows 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from brb_pipeline.core.contacts.resolve import resolve_contacts  # noqa: E402
from brb_pipeline.core.contacts.stats import contact_stats  # noqa: E402
from brb_pipeline.demo.generate import build_demo_archive  # noqa: E402
from brb_pipeline.sources.addressbook import read_addressbook  # noqa: E402
from brb_pipeline.sources.imessage import read_imessage  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "sources.json"


def naive_read(chat_db: Path, limit: int) -> int:
    """Row-at-a-time reader with pytypedstream, the straightforward way. Returns rows with text."""
    import typedstream

    con = sqlite3.connect(f"file:{chat_db}?mode=ro", uri=True)
    n = 0
    rows = con.execute(
        "SELECT m.ROWID, m.text, m.attributedBody, h.id, c.guid FROM message m "
        "LEFT JOIN handle h ON h.ROWID = m.handle_id "
        "LEFT JOIN chat_message_join j ON j.message_id = m.ROWID LEFT JOIN chat c ON c.ROWID = j.chat_id "
        "ORDER BY m.ROWID LIMIT ?", (limit,))
    for _rowid, text, body, _handle, _chat in rows:
        if not text and body:
            try:
                text = typedstream.unarchive_from_data(body).contents[0].values[0].value
            except Exception:
                text = None
        n += bool(text)
    con.close()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000, help="archive size (0: the whole corpus)")
    ap.add_argument("--peer-rows", type=int, default=5_000)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        archive = build_demo_archive(Path(tmp) / "archive", messages=args.messages or None)
        build_s = time.perf_counter() - t
        rows = []

        def timed(name, fn):
            t0 = time.perf_counter()
            out = fn()
            rows.append({"stage": name, "seconds": round(time.perf_counter() - t0, 3)})
            return out

        r = timed("read_imessage", lambda: read_imessage(archive.chat_db))
        ab = timed("read_addressbook", lambda: read_addressbook(archive.addressbook_dir))
        res = timed("resolve_contacts", lambda: resolve_contacts(r.messages, r.chats, ab.people))
        timed("contact_stats", lambda: contact_stats(res.messages))
        n = r.messages.height
        for row in rows:
            row["messages_per_s"] = round(n / row["seconds"]) if row["seconds"] else None
        total = sum(row["seconds"] for row in rows)
        t0 = time.perf_counter()
        peer_n = naive_read(archive.chat_db, args.peer_rows)
        peer_s = time.perf_counter() - t0
        peer_rate = args.peer_rows / peer_s
        ours_rate = n / total
    report = {
        "benchmark": "sources", "messages": n, "archive_build_s": round(build_s, 2),
        "from_attributed_body": r.stats.get("from_attributed_body"), "stages": rows,
        "ours_total_s": round(total, 3), "ours_messages_per_s": round(ours_rate),
        "peer": {"name": "row-at-a-time SQL + pytypedstream", "rows": args.peer_rows, "rows_with_text": peer_n,
                 "seconds": round(peer_s, 3), "messages_per_s": round(peer_rate)},
        "ratio_ours_vs_peer": round(ours_rate / peer_rate, 1),
        "load_average": os.getloadavg(), "python": platform.python_version(),
    }
    print(f"{'stage':<18}{'seconds':>10}{'msgs/s':>12}")
    for row in rows:
        print(f"{row['stage']:<18}{row['seconds']:>10.3f}{row['messages_per_s'] or 0:>12,}")
    print(f"{'ours, all stages':<18}{total:>10.3f}{round(ours_rate):>12,}")
    print(f"{'peer (subset)':<18}{peer_s:>10.3f}{round(peer_rate):>12,}   ratio ours/peer {report['ratio_ours_vs_peer']}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    from brb_pipeline import keys

    keys.install()  # a benchmark is an entry point: an encrypted home's files open with its key
    main()
