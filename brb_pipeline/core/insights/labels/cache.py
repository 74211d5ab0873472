"""Labels kept between runs: a label cache keyed by labeler kind and cluster membership, and
the labels of a previous run kept while a cluster's membership barely changed.

A cache key is the chain's kind (name, version, parameters, models: see
:attr:`~brb_pipeline.core.insights.labels.chain.LabelChain.kind`) and the sha1 of the sorted
chunk ids of the cluster, so an unchanged cluster is not re-labelled on the next run and a changed
labeler never reuses an older one's labels. Nothing here logs message text; log lines carry counts
only.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from brb_pipeline.core.crypto import files
from brb_pipeline.core.insights.labels.base import ClusterDocs, ClusterLabel
from brb_pipeline.core.insights.labels.chain import LabelChain

log = logging.getLogger(__name__)

#: A previous label is kept while the cluster's membership overlaps the one it was made from by
#: this much (Jaccard), so a few placed chunks do not send every touched cluster back to the
#: labeler (an LLM call each with mlx-lm).
LABEL_KEEP_OVERLAP = 0.9


def membership_hash(chunk_ids: Iterable[str]) -> str:
    """sha1 hex of the sorted, newline-joined chunk ids of one cluster."""
    h = hashlib.sha1()
    for cid in sorted(chunk_ids):
        h.update(cid.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


class LabelCache:
    """Labels keyed by (labeler kind, membership hash), stored as one small JSON file.

    Args:
        path: JSON file; created on :meth:`save`, a damaged file is treated as empty.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._data: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                loaded = files.read_json(self.path)
                if isinstance(loaded, dict):
                    self._data = loaded
            except (OSError, ValueError):
                log.warning("Labeling - label cache %s unreadable, starting empty", self.path.name)

    def __len__(self) -> int:
        return len(self._data)

    @staticmethod
    def key(kind: str, member_hash: str) -> str:
        return f"{kind}:{member_hash}"

    def get(self, kind: str, member_hash: str, cluster_id: int) -> ClusterLabel | None:
        entry = self._data.get(self.key(kind, member_hash))
        if not entry:
            return None
        return ClusterLabel(cluster_id, entry["label"], list(entry["terms"]), entry["source"])

    def put(self, kind: str, member_hash: str, label: ClusterLabel) -> None:
        self._data[self.key(kind, member_hash)] = {
            "label": label.label, "terms": label.terms, "source": label.source}

    def save(self) -> None:
        """Write atomically (temp file + rename), sealed when the home is encrypted."""
        files.write_json(self.path, self._data, ensure_ascii=False, sort_keys=True)


def label_clusters(chain: LabelChain, clusters: Sequence[ClusterDocs],
                   members: Mapping[int, Sequence[str]], cache: LabelCache | None = None,
                   reuse: Mapping[int, ClusterLabel] | None = None,
                   ) -> tuple[list[ClusterLabel], int]:
    """Label clusters, reusing cached labels for clusters whose membership did not change.

    Args:
        chain: the labeler chain.
        clusters: the clusters to label.
        members: cluster id -> its chunk ids (the membership that is hashed).
        cache: optional :class:`LabelCache`; saved when anything new was labelled.
        reuse: cluster id -> a label to keep as is (the caller judged the membership close
            enough to the one it was made from); neither asked for nor written to the cache.

    Returns:
        (labels in input order, number of cache hits; reused labels are not counted).
    """
    reuse = reuse or {}
    if cache is None and not reuse:
        return chain.label(clusters), 0
    kind = chain.kind
    hashes = [membership_hash(members.get(c.cluster_id, ())) for c in clusters]
    kept = [_relabel(reuse.get(c.cluster_id), c.cluster_id) for c in clusters]
    result: list[ClusterLabel | None] = [
        k or (cache.get(kind, h, c.cluster_id) if cache is not None else None)
        for c, h, k in zip(clusters, hashes, kept)]
    hits = sum(r is not None and k is None for r, k in zip(result, kept))
    todo = [i for i, r in enumerate(result) if r is None]
    if todo:
        for i, lab in zip(todo, chain.label_some(clusters, todo)):
            result[i] = lab
        if cache is not None:
            for i in todo:
                lab = result[i]
                if lab is not None and lab.source != "llm-fallback":  # retry the model next time
                    cache.put(kind, hashes[i], lab)
            cache.save()
    log.info("Labeling - %d clusters, %d from cache, %d kept", len(clusters), hits,
             sum(k is not None for k in kept))
    return [r for r in result if r is not None], hits


def _relabel(label: ClusterLabel | None, cluster_id: int) -> ClusterLabel | None:
    """``label`` carried to ``cluster_id`` (None stays None)."""
    if label is None:
        return None
    return ClusterLabel(cluster_id, label.label, list(label.terms), label.source)


def keep_by_overlap(previous: Iterable[Mapping[str, Any]], members: Mapping[int, Sequence[str]]
                    ) -> tuple[dict[int, ClusterLabel], dict[int, set[str]]]:
    """Previous labels still good for the current clusters, and the memberships they were made from.

    Args:
        previous: the previous run's label rows (``cluster_id``, ``label``, ``terms``,
            ``label_source``, ``made_from``: the chunk ids the label was made from), all made by
            the current labeler kind.
        members: current cluster id -> its chunk ids.

    Returns:
        (cluster id -> label to keep, cluster id -> chunk ids that label was made from), for the
        clusters whose Jaccard overlap with that membership is >= :data:`LABEL_KEEP_OVERLAP`.
        Fallback labels of a failed model answer are never kept (the model is asked again).
    """
    keep, bases = {}, {}
    for r in previous:
        cid, was = int(r["cluster_id"]), set(r["made_from"] or ())
        now = set(members.get(cid, ()))
        if not now or not was or r["label_source"] == "llm-fallback":
            continue
        if len(now & was) >= LABEL_KEEP_OVERLAP * len(now | was):
            keep[cid] = ClusterLabel(cid, r["label"], list(r["terms"] or []), r["label_source"])
            bases[cid] = was
    return keep, bases
