"""Search as a user asks it: route a named contact into a filter, embed the rest with the
model's query prefix, run hybrid/vector/lexical search, attach neighbours, log the search.

:class:`Searcher` opens the store once and answers many questions (``brb search -`` reads them
from stdin); :func:`run_search` is one question with its own open and close, as ``brb search
"QUERY"`` does. Opening costs several warm searches: loading the vss/fts extensions, attaching
the file, and on the first query reading the HNSW graph and the BM25 tables from disk
(``benchmarks/bench_e2e.py`` measures both; docs/benchmarks.md has the figures).
A Searcher holds a read-only connection to brb.duckdb; an ingest never writes that file in place
(it publishes a new one with a rename, see ``stages/store.py``), so an open Searcher neither
blocks an ingest nor sees a half-built store: it keeps answering from the file it opened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from brb_pipeline.core import metadata
from brb_pipeline.core.store import duck
from brb_pipeline.core.errors import StoreError
from brb_pipeline.core.search.dates import when
from brb_pipeline.core.search.fusion import Fusion
from brb_pipeline.core.contacts import people_db
from brb_pipeline.core.contacts.people_routing import PeopleRouter
from brb_pipeline.core.contacts.routing import ContactRef, Router
from brb_pipeline.core.contacts.speakers import passage_lines
from brb_pipeline.core.search.hybrid import neighbours, search
from brb_pipeline.core.search.log import log_search
from brb_pipeline.core.search.sql import Filters
from brb_pipeline.core.search.profiles import is_commitment_question, read_profile
from brb_pipeline.core.store.index import fts_present
from brb_pipeline.config.settings import Settings

if TYPE_CHECKING:
    from brb_pipeline.core.search.resident import Resident


def fusion_of(s: Settings) -> Fusion:
    """The hybrid fusion the settings describe."""
    return Fusion(method=s.search_fusion, lexical_weight=s.search_lexical_weight,
                  specific_lexical_weight=s.search_specific_lexical_weight, rare_df_share=s.search_rare_df_share,
                  rrf_k=s.rrf_k)


def require_store(s: Settings) -> None:
    if not s.brb_db.exists() or not s.duckdb_path.exists():
        raise StoreError(f"no search store in {s.home}: run `brb ingest` (or `brb demo`) first")


def contact_refs(s: Settings) -> list[ContactRef]:
    return [ContactRef(r["contact_id"], r["display_name"], tuple(r.get("handles") or []))
            for r in metadata.contact_rows(s.brb_db)]


@dataclass(frozen=True)
class _People:
    """The people of a store, as search reads them once: routing refs (person id as contact_id),
    person id -> conversations (contact ids), and chat_id -> members (``passage_lines``)."""

    refs: list[ContactRef]
    conversations: dict[str, set[str]]
    members: dict[str, list[tuple[str, str, list[str]]]]
    names: dict[str, str]

    @classmethod
    def read(cls, s: Settings) -> _People | None:
        """None for a store made before people existed (search then routes by contact)."""
        view = people_db.search_view(s.brb_db)
        if view is None:
            return None
        rows, members = view
        refs = [ContactRef(r["person_id"], r["display_name"], tuple(r["handles"]), r.get("nickname")) for r in rows]
        convs = {r["person_id"]: {c["contact_id"] for c in r["conversations"]} for r in rows}
        return cls(refs, convs, members, {r["person_id"]: r["display_name"] for r in rows})


@dataclass(frozen=True)
class _Store:
    """What a Searcher reads once: the read-only store, the contacts (routing and hit names), the
    model the store was embedded with and, for a session of many searches, the chunks held in
    memory (:class:`.resident.Resident`; None: searches run as SQL)."""

    con: Any
    refs: list[ContactRef]
    model: str | None
    resident: Resident | None = None
    people: _People | None = None

    @classmethod
    def open(cls, s: Settings, resident: bool = False) -> _Store:
        require_store(s)
        refs = contact_refs(s)
        people = _People.read(s)
        con = duck.connect(s.duckdb_path, read_only=True)
        try:
            held = None
            if resident and duck.table_exists(con, "chunks") and fts_present(con):
                from brb_pipeline.core.search.resident import Resident  # pyarrow: sessions only

                held = Resident.load(con)
            return cls(con, refs, duck.get_meta(con, "embedding_model"), held, people)
        except BaseException:
            con.close()
            raise


class Searcher:
    """The store, its contacts and the query model, opened once for many searches.

    Args:
        embedder: the store's embedding model (None only for lexical searches).
        store: an opened store (default: opened here).
        resident: hold the chunks in memory for fast searches (``store`` None only): costs a
            load of every vector, text and BM25 posting at open, so a one-shot search runs as SQL.

    Raises:
        StoreError: no store yet.
    """

    def __init__(self, s: Settings, *, embedder: Any | None, store: _Store | None = None,
                 resident: bool = True) -> None:
        store = store or _Store.open(s, resident)
        self.settings = s
        self.embedder = embedder
        self.con, self.refs, self.stored_model, self.resident = store.con, store.refs, store.model, store.resident
        self._names = {r.contact_id: r.display_name for r in self.refs}
        self._router = Router(self.refs)
        self.people = store.people
        self._people_router = PeopleRouter(self.people.refs, self.people.conversations, self._names) \
            if self.people else None

    @classmethod
    def open(cls, s: Settings, *, mode: str = "hybrid", load: Callable[[Settings], Any] | None = None,
             resident: bool = True) -> Searcher:
        """A Searcher with the model the mode needs, the store opening in a worker thread while
        the model loads here (MLX streams belong to the thread that made them): loading the
        vss/fts extensions and loading the weights both release the GIL, so a one-shot search
        pays about the slower of the two instead of their sum."""
        require_store(s)
        if mode == "lexical":
            return cls(s, embedder=None, resident=resident)
        if load is None:
            from brb_pipeline.core.embedding.models import load_embedder

            def load(s_: Settings) -> Any:
                return load_embedder(s_.embedding)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="brb-store") as pool:
            store = pool.submit(_Store.open, s, resident)
            try:
                embedder = load(s)
            except BaseException:
                wait([store])
                if store.exception() is None:
                    store.result().con.close()
                raise
            return cls(s, embedder=embedder, store=store.result())

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Searcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _query_vector(self, text: str, mode: str) -> Any:
        if mode == "lexical":
            return None
        if self.embedder is None:
            raise StoreError("vector search needs the embedding model")
        if self.stored_model and self.stored_model != self.embedder.model_id:
            raise StoreError(f"the store was embedded with {self.stored_model} but the configured model is "
                             f"{self.embedder.model_id}: run `brb ingest` to re-embed, or search with --mode lexical")
        return self.embedder.embed_query(text)

    def search(
        self,
        query: str,
        *,
        mode: str = "hybrid",
        k: int = 10,
        contacts: list[str] | None = None,
        senders: list[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        channel: str | None = None,
        route: bool = True,
        context: bool = False,
        fusion: Fusion | None = None,
        merge: bool = True,
        diversity: float | None = None,
        log: bool = True,
        started: float | None = None,
        dates: bool = True,
        lines: bool = True,
    ) -> dict[str, Any]:
        """One search, as a JSON-able dict (docs/search.md lists the fields).

        Args:
            contacts: names or handles of people: the conversations they take part in (1:1 and
                groups; resolved against brb.db).
            senders: names or handles of people: only passages with a message they sent (``--from``).
            route: turn a contact named in the question into a filter and search the rest.
            context: include the neighbouring chunks (position ±1) of each hit.
            fusion: hybrid fusion (default: the settings' ``search_*`` values).
            merge: fold overlapping windows of one conversation into one hit.
            diversity: MMR trade-off (0, 1] across conversations; None: off.
            log: append the search to the local search log.
            started: ``time.perf_counter()`` when the caller's clock started (``latency_ms``
                counts from it; default: now).
            dates: read a date said in words ("last summer", "in May 2023", "two weeks ago") into
                ``since``/``until`` (:mod:`brb_pipeline.core.search.dates`), shown in
                ``routing["dates"]``; an explicit ``since`` or ``until`` wins and the words are not read.
            lines: hybrid mode re-ranks its candidates by their best message line (the store's
                line vectors); False keeps the fused order (benchmarks compare the two).
        """
        t0 = time.perf_counter() if started is None else started
        s = self.settings
        text, contact_ids, chunk_ids, routing = self._filters(query, contacts, senders, route)
        said = when(query) if dates and since is None and until is None else None
        if said is not None:
            routing["dates"] = said.as_json()  # an unresolved phrase is said here and searched as text
            if said.resolved and self._any_chunk(said.since, said.until, contact_ids or None):
                since, until = said.since, said.until
            elif said.resolved:  # a range with nothing in it would answer nothing: say so, search it all
                routing["dates"]["applied"] = False
        t_embed = time.perf_counter()
        vec = self._query_vector(text, mode)
        embed_ms = (time.perf_counter() - t_embed) * 1000
        # A routed name is cut from what is embedded, but BM25 still ranks on the whole question:
        # in a group chat the filter no longer says who said what, and "Priya" in a line still counts.
        res = search(self.con, query_text=text, query_vec=vec, mode=mode, k=k, fusion=fusion or fusion_of(s),
                     lexical_text=query if text != query else None, lines=lines,
                     filters=Filters(contact_ids or None, channel, since, until, chunk_ids),
                     ef_search=s.hnsw_ef_search, merge=merge, diversity=diversity,
                     min_similarity=s.search_min_similarity or None, region=s.default_region, topics=True,
                     resident=self.resident)
        res.timings_ms["embed"] = embed_ms  # the query embedding, apart from search's own total
        hits = [self._topic_hit(h) if h.kind == "topic" else self._hit(h, context) for h in res.hits]
        profile = self._commitments(contact_ids[0]) if contact_ids and is_commitment_question(query) else None
        latency_ms = round((time.perf_counter() - t0) * 1000, 2)
        if log:
            log_search(s.brb_db, query=query, mode=mode, model=self.stored_model, contact_ids=contact_ids,
                       results=[(h["chunk_id"], h["scores"]["fused"]) for h in hits if h["kind"] == "chunk"],
                       latency_ms=latency_ms)
        return {"query": query, "mode": mode, "k": k, "routing": routing, "filters": {
            "contact_ids": contact_ids, **({"from": routing.pop("from")} if "from" in routing else {}),
            "since": since.isoformat() if since else None,
            "until": until.isoformat() if until else None, "channel": channel},
            "model": self.stored_model, "vector_strategy": res.vector_strategy, "latency_ms": latency_ms,
            "timings_ms": res.timings_ms, "confident": res.confident, "top_similarity": res.top_similarity,
            "specific": res.specific, "lexical_coverage": res.lexical_coverage, "phrases": res.phrases,
            "lines_reranked": res.lines_reranked,
            "merged": res.merged, **({"profile": profile} if profile else {}),
            "hits": hits}

    def _any_chunk(self, since: datetime | None, until: datetime | None, contact_ids: list[str] | None) -> bool:
        """Whether any chunk (of these contacts) overlaps ``[since, until)``."""
        if self.resident is not None:
            keep = self.resident.mask(Filters(contact_ids, None, since, until))
            return keep is None or bool(keep.any())
        where, params = Filters(contact_ids, None, since, until).sql()
        return bool(self.con.execute(f"SELECT EXISTS (SELECT 1 FROM chunks WHERE {where})", params).fetchone()[0])

    def _filters(self, query: str, contacts: list[str] | None, senders: list[str] | None, route: bool
                 ) -> tuple[str, list[str], list[str] | None, dict[str, Any]]:
        """(text to search, conversation contact ids, chunk ids or None, the routing report)."""
        s = self.settings
        routing: dict[str, Any] = {"matched": [], "contact_ids": [], "query": query, "person_ids": [],
                                   "ambiguous": []}
        contact_ids: list[str] = []
        if contacts:  # a person's conversations (a group chat's name: that group)
            contact_ids = people_db.person_contact_ids(s.brb_db, contacts, default_region=s.default_region)
        chunk_ids = None
        if senders:
            if not self.people:
                raise StoreError("--from needs the people of this store: run `brb ingest` to rebuild it")
            pids = people_db.find_people(s.brb_db, senders, default_region=s.default_region)
            theirs = sorted(set().union(*(self.people.conversations.get(p, set()) for p in pids)))
            contact_ids = sorted(set(contact_ids) & set(theirs)) if contacts else theirs
            chunk_ids = self._spoken_by(pids, contact_ids)
            routing["from"] = pids
        if not route or contact_ids or senders:
            return query, contact_ids, chunk_ids, routing
        if self._people_router is not None:
            r = self._people_router.route(query)
            if r.contact_ids and r.query.strip():
                return r.query, r.contact_ids, None, {
                    "matched": r.matched, "contact_ids": r.contact_ids, "query": r.query,
                    "person_ids": r.person_ids, "ambiguous": r.ambiguous}
            return query, [], None, routing
        routed = self._router.route(query)
        if routed.contact_ids and routed.query.strip():
            routing.update(matched=list(routed.matched), contact_ids=list(routed.contact_ids), query=routed.query)
            return routed.query, list(routed.contact_ids), None, routing
        return query, [], None, routing

    def _spoken_by(self, person_ids: list[str], contact_ids: list[str]) -> list[str]:
        """The chunks of ``contact_ids`` with a line sent by one of ``person_ids``."""
        names = sorted({self.people.names[p] for p in person_ids if p in self.people.names})
        if not names or not contact_ids:
            return []
        marks = " OR ".join("strpos(chr(10) || content, ?) > 0" for _ in range(2 * len(names)))
        params = [p for n in names for p in (f"\n{n} (", f"\n{n}: ")]
        rows = self.con.execute(f"SELECT chunk_id FROM chunks WHERE list_contains(?::VARCHAR[], contact_id) "
                                f"AND ({marks})", [contact_ids, *params]).fetchall()
        return [r[0] for r in rows]

    def _commitments(self, contact_id: str) -> dict[str, Any] | None:
        """The answer to "what did I promise NAME" from NAME's profile (None without one)."""
        p = read_profile(self.con, contact_id)
        if p is None:
            return None
        return {"contact_id": contact_id, "contact": self._names.get(contact_id, contact_id),
                "relationship": p["relationship"], "commitments": p["commitments"]}

    def _topic_hit(self, h: Any) -> dict[str, Any]:
        """A topic summary hit, with the span of messages that opens its conversation."""
        return {
            "kind": "topic", "topic_id": h.topic_id, "contact_id": h.contact_id,
            "contact": self._names.get(h.contact_id, h.contact_id), "chat_id": h.chat_id, "month": h.month,
            "language": h.language, "label": h.label, "summary": h.summary,
            "start": h.first_ts.isoformat() if h.first_ts else None,
            "end": h.last_ts.isoformat() if h.last_ts else None,
            "first_message_id": h.first_message_id, "last_message_id": h.last_message_id,
            "scores": {"vector": h.vector_score, "vector_rank": h.vector_rank, "lexical": h.lexical_score,
                       "lexical_rank": h.lexical_rank, "fused": h.score},
            "text": "\n".join(p for p in (h.label, h.summary) if p),
        }

    def _hit(self, h: Any, context: bool) -> dict[str, Any]:
        item = {
            "kind": "chunk", "chunk_id": h.chunk_id, "chunk_ids": h.chunk_ids or [h.chunk_id], "contact_id": h.contact_id, "contact": self._names.get(h.contact_id, h.contact_id),
            "chat_id": h.chat_id, "channel": h.channel,
            "start": h.start_ts.isoformat() if h.start_ts else None,
            "end": h.end_ts.isoformat() if h.end_ts else None,
            "scores": {"vector": h.vector_score, "vector_rank": h.vector_rank, "lexical": h.lexical_score,
                       "lexical_rank": h.lexical_rank, "fused": h.score},
            "text": h.content,
        }
        if self.people is not None:  # who takes part, and who said each line
            members = self.people.members.get(h.chat_id, [])
            item["participants"] = [{"person_id": p, "name": n, "handles": hs} for p, n, hs in members]
            item["lines"] = passage_lines(h.content, members)
        if context:  # the chunks just before and after the passage (a merged one spans several)
            members = set(item["chunk_ids"])
            around = {n.chunk_id: n for c in item["chunk_ids"] for n in neighbours(self.con, c, span=1)
                      if n.chunk_id not in members}
            item["context"] = [{"chunk_id": n.chunk_id, "position": n.position, "text": n.content}
                               for n in sorted(around.values(), key=lambda n: (n.position, n.chunk_id))]
        return item


def run_search(s: Settings, query: str, *, embedder: Any | None, **options: Any) -> dict[str, Any]:
    """One search with its own store open and close (``brb search "QUERY"``); ``latency_ms``
    includes the open. Options as :meth:`Searcher.search`."""
    started = time.perf_counter()
    with Searcher(s, embedder=embedder, resident=False) as searcher:
        return searcher.search(query, started=started, **options)


def run_search_cold(s: Settings, query: str, **options: Any) -> dict[str, Any]:
    """One search from nothing loaded (``brb search "QUERY"``): the model loads while the store
    opens; ``latency_ms`` counts from the start of both."""
    started = time.perf_counter()
    with Searcher.open(s, mode=options.get("mode", "hybrid"), resident=False) as searcher:
        return searcher.search(query, started=started, **options)
