"""The answers of `brb mcp`'s tools, from one home opened once and held for the session.

:class:`Home` opens everything at start (a missing home or key fails there, before the server
answers anything): the store read-only with its chunks in memory (the :class:`~brb_pipeline.
search.query.Searcher` resident path), the embedding model, the contacts of ``brb.db`` and
the staged messages (:class:`.lines.Transcript`). Nothing here writes, except one search-log row
per ``search`` call when the server was started with the log on (``brb mcp --log``).

The server answers from the store it opened: an ingest publishes a new file beside it, which
the next start reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from brb_pipeline.assistant.args import Args, ToolError, parse_time
from brb_pipeline.assistant.lines import Transcript, citation_id
from brb_pipeline.core.contacts import people_db
from brb_pipeline.core import metadata
from brb_pipeline.core.crypto import files
from brb_pipeline.core.errors import BrbError
from brb_pipeline.config.settings import Settings

log = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "lexical")
CHANNELS = ("imessage", "whatsapp", "mail")
#: The most lines one passage carries (a merged passage can span many windows).
MAX_PASSAGE_LINES = 60
NO_MEMORY = ("No distilled profile or topics for this person: brb distills them only when a local model is "
             "configured (llm_model_path) and the ingestion has run with it.")


@dataclass
class Home:
    """One home's stores, open for a session of tool calls."""

    settings: Settings
    searcher: Any  # search.query.Searcher
    transcript: Transcript
    contacts: list[dict[str, Any]]
    chunk_runs: dict[str, tuple[str, str]]  # chunk_id -> (first_message_id, last_message_id)
    people: list[dict[str, Any]] | None = None  # people_db.people_rows; None in a store made before people
    log: bool = False
    opened_at: str = ""

    @classmethod
    def open(cls, s: Settings, *, log: bool = False, load: Callable[[Settings], Any] | None = None) -> Home:
        """Open the home (raises BrbError with one line: no store, no key, a wrong key)."""
        from brb_pipeline.search.query import Searcher, require_store

        require_store(s)
        files.file_key(s.brb_db)  # an encrypted home without its key fails here, in one line
        contacts = metadata.contact_rows(s.brb_db)
        searcher = Searcher.open(s, mode="hybrid", load=load, resident=True)
        try:
            runs = {c: (f, l) for c, f, l in searcher.con.execute(
                "SELECT chunk_id, first_message_id, last_message_id FROM chunks").fetchall()}
            by_contact = {r["contact_id"]: r["display_name"] for r in contacts}
            by_handle = {h: r["display_name"] for r in contacts if r["kind"] == "direct" for h in r["handles"] or []}
            if people_db.has_people(s.brb_db):  # every group member named from their card, as passages are
                by_handle.update(people_db.handle_names(s.brb_db))
            transcript = Transcript.load(s.paths.messages, s.paths.parsed_chats, contact_names=by_contact,
                                         handle_names=by_handle, time_zone=s.time_zone)
        except BaseException:
            searcher.close()
            raise
        people = people_db.people_rows(s.brb_db) if people_db.has_people(s.brb_db) else None
        return cls(s, searcher, transcript, contacts, runs, people, log,
                   datetime.now().astimezone().isoformat(timespec="seconds"))

    def close(self) -> None:
        self.searcher.close()

    def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[dict[str, Any] | str, bool]:
        """``(result, False)``, or ``(one sentence, True)`` for a call that cannot be answered."""
        tool = TOOLS.get(name)
        if tool is None:
            return f"There is no tool {name!r}; the tools are: {', '.join(TOOLS)}.", True
        t0 = time.perf_counter()
        try:
            return tool(self, arguments), False
        except ToolError as e:
            return str(e), True
        except BrbError as e:
            return (str(e).splitlines() or ["error"])[0], True
        except Exception as e:  # a bug: the server keeps answering; its text never reaches the log
            log.error("tool %s failed: %s", name, type(e).__name__)
            return f"{name} failed with an internal error ({type(e).__name__}); other calls still work.", True
        finally:
            log.debug("tool %s answered in %.1f ms", name, (time.perf_counter() - t0) * 1000)

    # --- search -----------------------------------------------------------------------------

    def search(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        a = Args("search", arguments, ["query", "k", "contact", "from", "since", "until", "channel", "mode"])
        query = a.text("query", max_len=1000, required=True)
        k = a.integer("k", 10, 1, 50)
        contact, sender = a.text("contact", max_len=200), a.text("from", max_len=200)
        since, until = a.date("since"), a.date("until")
        channel, mode = a.choice("channel", CHANNELS), a.choice("mode", MODES, "hybrid")
        a.done()
        if since and until and since >= until:
            raise ToolError("'since' must be earlier than 'until'.")
        senders = self._senders(sender) if sender else None
        out = self.searcher.search(query, mode=mode, k=k if senders is None else min(200, 5 * k),
                                   contacts=self._conversations(contact) if contact else None, since=since,
                                   until=until, channel=channel, log=self.log)
        hits = [self._passage(h) for h in out["hits"]]
        if senders is not None:
            hits = [h for h in hits if any(_sent_by(line, senders) for line in h.get("lines") or [])]
        names = {r["contact_id"]: r["display_name"] for r in self.contacts}
        return {"query": query, "mode": mode, "hits": hits[:k], "filters": {
            "contacts": [names.get(c, c) for c in out["filters"]["contact_ids"]],
            "routed_from_query": out["routing"]["matched"], "from": sender, "since": out["filters"]["since"],
            "until": out["filters"]["until"], "channel": channel}, "confident": out["confident"]}

    def _contact_id(self, name: str) -> str:
        """The contact ``name`` names, as ``brb search --contact`` finds it (id, handle, name, or
        the start of a name); none or several is a ToolError."""
        from brb_pipeline.core.contacts.lookup import find_contacts

        try:
            return find_contacts(self.settings.brb_db, [name], default_region=self.settings.default_region)[0]
        except BrbError as e:
            if str(e).startswith("no contact matches"):
                raise ToolError(f"No person or group matches {name!r}: list_people shows the names.") from None
            raise ToolError(str(e).splitlines()[0]) from None

    def _conversations(self, name: str) -> list[str]:
        """The conversations ``contact`` means, as ``brb search --contact`` takes it: every
        conversation of the person it names (1:1 and groups), or the group chat it names."""
        if self.people is None:
            return [self._contact_id(name)]
        s = self.settings
        try:
            return people_db.person_contact_ids(s.brb_db, [name], default_region=s.default_region)
        except BrbError as e:
            raise _no_match(name, e) from None

    def _person(self, name: str) -> dict[str, Any]:
        """The people row ``name`` names (a ToolError for none or several)."""
        s = self.settings
        try:
            pid = people_db.find_people(s.brb_db, [name], default_region=s.default_region)[0]
        except BrbError as e:
            raise _no_match(name, e) from None
        return next(r for r in self.people or [] if r["person_id"] == pid)

    def _senders(self, who: str) -> set[str | None]:
        """The sender handles ``from`` names (None stands for the owner: "me")."""
        if who.strip().casefold() in ("me", "myself", "i"):
            return {None}
        if self.people is not None:  # a person in 1:1 chats or only in groups
            return set(self._person(who)["handles"])
        cid = self._contact_id(who)
        row = next(r for r in self.contacts if r["contact_id"] == cid)
        if row["kind"] != "direct":
            raise ToolError(f"'from' names a person; {row['display_name']!r} is a group: pass it as 'contact'.")
        return set(row["handles"] or [])

    def _passage(self, h: dict[str, Any]) -> dict[str, Any]:
        """A search hit with its messages one per line and a citation id."""
        if h["kind"] == "topic":
            return {"kind": "topic", "citation": citation_id(h["chat_id"], h["first_message_id"] or "",
                                                             h["last_message_id"] or ""),
                    **self.transcript.chat(h["chat_id"]), "label": h["label"], "summary": h["summary"],
                    "start": h["start"], "end": h["end"], "score": h["scores"]["fused"],
                    "first_message_id": h["first_message_id"], "last_message_id": h["last_message_id"]}
        rows = [self.transcript.run(h["chat_id"], *self.chunk_runs[c]) for c in h["chunk_ids"] if c in self.chunk_runs]
        rows = [r for r in rows if r is not None]
        item = {"kind": "passage", **self.transcript.chat(h["chat_id"]), "contact": h["contact"],
                "start": h["start"], "end": h["end"], "score": h["scores"]["fused"], "chunk_ids": h["chunk_ids"]}
        if not rows:  # messages not staged (should not happen): the stored text, without ids
            runs = [self.chunk_runs.get(c, ("", "")) for c in h["chunk_ids"]]
            return {"citation": citation_id(h["chat_id"], runs[0][0], runs[-1][1]), **item, "text": h["text"]}
        lo, hi = min(r[0] for r in rows), max(r[1] for r in rows)
        ids = self.transcript.ids
        return {"citation": citation_id(h["chat_id"], ids[lo], ids[hi - 1]), **item,
                "first_message_id": ids[lo], "last_message_id": ids[hi - 1],
                "lines": self.transcript.lines(lo, min(hi, lo + MAX_PASSAGE_LINES)),
                "more_lines": max(0, hi - lo - MAX_PASSAGE_LINES)}

    # --- reading further --------------------------------------------------------------------

    def get_conversation(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        a = Args("get_conversation", arguments, ["conversation", "around", "before", "after"])
        chat = a.text("conversation", max_len=500, required=True)
        around = a.text("around", max_len=200)
        before, after = a.integer("before", 10, 0, 100), a.integer("after", 10, 0, 100)
        a.done()
        span = self.transcript.spans.get(chat)
        if span is None:
            raise ToolError("No such conversation: pass the 'conversation' value of a search hit or of list_people.")
        anchor = self._anchor(chat, span, around)
        lo, hi = max(span[0], anchor - before), min(span[1], anchor + after + 1)
        return {**self.transcript.chat(chat), "anchor": self.transcript.ids[anchor],
                "messages": self.transcript.lines(lo, hi), "more_before": lo > span[0], "more_after": hi < span[1]}

    def _anchor(self, chat: str, span: tuple[int, int], around: str | None) -> int:
        """The row ``around`` points at: a message id of the chat, or the first message at or
        after a time (the last message when there is none, or when ``around`` is not given)."""
        t = self.transcript
        if around is None:
            return span[1] - 1
        row = t.row_of.get(around)
        if row is not None:
            if not span[0] <= row < span[1]:
                raise ToolError("That message id belongs to another conversation.")
            return row
        when = parse_time(around)
        if when is None:
            raise ToolError("'around' must be a message id of this conversation or a time like 2024-05-01T18:00.")
        return next((i for i in range(*span) if t.ts[i] is not None and t.ts[i] >= when), span[1] - 1)

    # --- people -----------------------------------------------------------------------------

    def list_people(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        from brb_pipeline.core.contacts.routing import fold

        a = Args("list_people", arguments, ["query", "limit"])
        query, limit = a.text("query", max_len=200), a.integer("limit", 50, 1, 200)
        a.done()
        q = fold(query) if query else None
        every = self.contacts if self.people is None else self.people
        rows = [r for r in every
                if q is None or q in fold(r["display_name"]) or any(q in fold(h) for h in r["handles"] or [])]
        show = self._person_row if self.people is None else self._people_row
        return {"people": [show(r) for r in rows[:limit]], "matched": len(rows), "more": max(0, len(rows) - limit)}

    def _people_row(self, r: dict[str, Any]) -> dict[str, Any]:
        """A person (one card or unknown handle) across 1:1 chats, groups and channels; ``kind``
        is "direct" when they have a 1:1 conversation (``contact_id``), else "group_only"."""
        convs = r["conversations"]
        direct = next((c["contact_id"] for c in convs if c["kind"] == "direct"), None)
        return {"name": r["display_name"], "person_id": r["person_id"], "contact_id": direct,
                "kind": "direct" if direct else "group_only", "handles": r["handles"], "channels": r["channels"],
                "messages": r["messages"], "sent": r["sent"], "received": r["received"],
                "group_messages": r["group_messages"], "first": r["first_ts"], "last": r["last_ts"],
                "conversations": [c["chat_id"] for c in convs]}

    def _person_row(self, r: dict[str, Any]) -> dict[str, Any]:
        chats = [c for c, info in self.transcript.chats.items() if info["contact_id"] == r["contact_id"]]
        return {"name": r["display_name"], "contact_id": r["contact_id"], "kind": r["kind"],
                "handles": r["handles"], "channels": r["channels"], "messages": r["messages"], "sent": r["sent"],
                "received": r["received"], "first": r["first_ts"], "last": r["last_ts"], "conversations": chats}

    def person(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        from brb_pipeline.core.search.profiles import contact_topics, read_profile

        a = Args("person", arguments, ["name"])
        name = a.text("name", max_len=200, required=True)
        a.done()
        if self.people is None:
            r = next(r for r in self.contacts if r["contact_id"] == self._contact_id(name))
            row, cid = self._person_row(r), r["contact_id"]
        else:
            r = self._person(name)
            row = self._people_row(r)
            cid = row["contact_id"]  # the distilled memory is kept per 1:1 conversation
        profile = read_profile(self.searcher.con, cid) if cid else None
        topics = contact_topics(self.searcher.con, cid) if cid else []
        out = {**row, "avg_reply_seconds": {"me": r["avg_response_s_me"],
                                                            "them": r["avg_response_s_them"]},
               "profile": profile, "topics": topics[:20], "more_topics": max(0, len(topics) - 20)}
        if self.people is not None:  # tapbacks per person, and the groups they joined or left (issue 31)
            out["tapbacks"] = {"given": r.get("reactions_sent") or 0, "got": r.get("reactions_received") or 0,
                               "given_by_kind": r.get("reactions") or {}}
            out["group_membership"] = [{"conversation": c["chat_id"], "joined": c.get("joined_ts"),
                                        "left": c.get("left_ts")} for c in r["conversations"] if c["kind"] == "group"]
        if profile is None and not topics:
            out["memory_note"] = NO_MEMORY
        return out

    def status(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        from brb_pipeline.core.memory.tables import memory_counts
        from brb_pipeline.core.store import duck
        from brb_pipeline.keys import provider as keys

        Args("status", arguments, []).done()
        s = self.settings
        run = metadata.last_run(s.brb_db)
        memory = memory_counts(self.searcher.con)
        return {"home": str(s.home), "messages": sum(r["messages"] or 0 for r in self.contacts),
                "contacts": len(self.contacts), "people": None if self.people is None else len(self.people),
                "conversations": None if self.people is None else len(
                    {c["chat_id"] for p in self.people for c in p["conversations"]}),
                "chunks": len(self.searcher.resident or []) or None,
                "embedding_model": duck.get_meta(self.searcher.con, "embedding_model"),
                "last_ingestion": {k: run.get(k) for k in ("status", "messages", "first_ts", "last_ts")} | {
                    "finished_at": _iso_epoch(run.get("finished_at"))} if run else None,
                "channels": s.channels(), "encrypted": bool(keys.describe(s).get("encrypted")),
                "memory": {**memory, "model_based_memory": bool(memory["topics"] or memory["profiles"])},
                "search_log": "on" if self.log else "off", "server_started": self.opened_at,
                "note": "Answers come from the store as it was when the server started; restart it after an ingest."}


def _no_match(name: str, e: BrbError) -> ToolError:
    """A lookup's error as a tool error: none found points at list_people; several say who."""
    said = (str(e).splitlines() or ["error"])[0]
    if said.startswith(("no person matches", "no contact matches")):
        return ToolError(f"No person or group matches {name!r}: list_people shows the names.")
    return ToolError(said)


def _sent_by(line: dict[str, Any], senders: set[str | None]) -> bool:
    mine = line["sender"] == "Me" and line["sender_handle"] is None
    return (None if mine else line["sender_handle"] or "") in senders


def _iso_epoch(v: float | None) -> str | None:
    return datetime.fromtimestamp(v).astimezone().isoformat(timespec="seconds") if v else None


TOOLS: dict[str, Callable[[Home, dict[str, Any] | None], dict[str, Any]]] = {
    "search": Home.search, "get_conversation": Home.get_conversation, "list_people": Home.list_people,
    "person": Home.person, "status": Home.status,
}
