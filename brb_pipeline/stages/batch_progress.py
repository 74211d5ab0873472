"""The chunking and embedding bars of a run's batch loop, as a whole rather than per batch.

A headless run processes the batches :func:`stages.incremental.pending_work` lists one after
the other; :class:`BatchProgress` turns the per-batch calls of ``run_chunk`` and ``run_embed``
into one bar per stage, weighted by the batches' message counts, with counts a host app shows.
Without a plan (a partition run launched from the Dagster UI) it reports nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from brb_pipeline.core import metadata
from brb_pipeline.core.progress import Progress
from brb_pipeline.config.settings import Settings

#: ``run_embed``'s callback: (chunks done, chunks total, contact_id of the next chunk).
EmbedCallback = Callable[..., None]


class BatchPlan:
    """The batches a run chunks and embeds, in order, weighted by their message counts: the
    chunking and embedding percents advance by messages, so a top batch of ten busy contacts
    weighs more than a tail batch of fifty quiet ones and the ETA extrapolates fairly."""

    def __init__(self, todo: list[str], batches: list[dict[str, Any]]) -> None:
        rows = {b["batch"]: b for b in batches}
        self.todo = todo
        self.messages = {b: int(rows.get(b, {}).get("messages") or 0) for b in todo}
        self.contacts = {b: int(rows.get(b, {}).get("contacts") or 0) for b in todo}
        self.before: dict[str, int] = {}
        acc = 0
        for b in todo:
            self.before[b] = acc
            acc += max(1, self.messages[b])
        self.weight = max(1, acc)

    def percent(self, batch: str, frac: float) -> float:
        """Percent of the whole loop once ``frac`` (0-1) of ``batch`` is done."""
        if batch not in self.before:
            return 0.0
        return 100 * (self.before[batch] + frac * max(1, self.messages[batch])) / self.weight

    def totals(self, done: list[str]) -> dict[str, int]:
        """Batches, contacts and messages of the finished batches ``done``, and of all."""
        return {"batches_done": len(done), "batches_total": len(self.todo),
                "contacts_done": sum(self.contacts[b] for b in done), "contacts_total": sum(self.contacts.values()),
                "messages_done": sum(self.messages[b] for b in done), "messages_total": sum(self.messages.values())}


class BatchProgress:
    """Chunking and embedding progress over the batches of one run (see :meth:`start`).

    Embedding reports percent by messages, the batch's chunks done and total, chunks embedded in
    the run so far (the rate and ETA), batches and contacts finished, and whose chunks are
    embedded (display name, else the batch key). Names only, never message text.
    """

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.plan: BatchPlan | None = None
        self.names: dict[str, str] = {}
        self.embedded: dict[str, int] = {}  # batch -> chunks embedded
        self.finished: list[str] = []

    def start(self, s: Settings, todo: list[str]) -> None:
        """Plan the loop over ``todo`` (batch keys in run order)."""
        self.plan = BatchPlan(todo, metadata.all_batches(s.brb_db))
        self.names = display_names(s)
        self.embedded, self.finished = {}, []

    def chunking(self, batch: str) -> None:
        """Chunking as ``batch`` starts (a batch the plan does not hold: nothing)."""
        plan = self.plan
        if plan is None or batch not in plan.before:
            return
        i = plan.todo.index(batch)
        self._chunking(plan, i, f"{batch} ({i + 1}/{len(plan.todo)})")

    def embedding(self, batch: str) -> EmbedCallback | None:
        """``run_embed``'s progress callback for ``batch`` (None without a plan)."""
        plan = self.plan
        if plan is None:
            return None

        def cb(done: int, total: int, contact_id: str | None = None) -> None:
            frac = done / total if total else 1.0
            self.embedded[batch] = done
            if frac >= 1.0 and batch not in self.finished:
                self.finished.append(batch)
            embedded = sum(self.embedded.values())
            self.progress.update("embedding", plan.percent(batch, frac), f"{batch} {done:,}/{total:,} chunks",
                                 current_contact=self.names.get(contact_id or "") or batch,
                                 count=embedded, unit="chunks", batch=batch, chunks_done=done, chunks_total=total,
                                 chunks_embedded=embedded, **_batch_counts(plan, self.finished))

        return cb

    def finish(self, unchanged: int) -> None:
        """Both bars at 100% once every planned batch is done; ``unchanged``: batches not run."""
        plan = self.plan
        if plan is None:
            return
        n = len(plan.todo)
        self._chunking(plan, n, f"{n} batches")
        embedded = sum(self.embedded.values())
        self.progress.update("embedding", 100, f"{n} batches embedded, {unchanged} unchanged", count=embedded,
                             unit="chunks", chunks_embedded=embedded, **_batch_counts(plan, plan.todo))

    def _chunking(self, plan: BatchPlan, i: int, message: str) -> None:
        """Chunking as batch ``i`` starts (``i == len(todo)``: all done); rate in messages/s."""
        done = plan.todo[:i]
        pct = 100.0 if i >= len(plan.todo) else plan.percent(plan.todo[i], 0.0)
        stats = plan.totals(done)
        self.progress.update("chunking", pct, message, current_contact=plan.todo[i] if i < len(plan.todo) else None,
                             count=stats["messages_done"], unit="messages", **stats)


def _batch_counts(plan: BatchPlan, done: list[str]) -> dict[str, int]:
    """Batches and contacts of ``done`` and of all (embedding counts chunks, not messages)."""
    stats = plan.totals(done)
    del stats["messages_done"], stats["messages_total"]
    return stats


def display_names(s: Settings) -> dict[str, str]:
    """contact_id -> display name, for ``current_contact`` in progress."""
    contacts = metadata.read_contacts(s.brb_db)
    return {c: n for c, n in zip(contacts["contact_id"].to_list(), contacts["display_name"].to_list()) if n}
