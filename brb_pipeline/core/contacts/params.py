"""How contacts become partitions, apart from :mod:`.batching` so that reading settings imports
no polars."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchParams:
    """How contacts become partitions (the ``top_contacts``, ``top_batch_size`` and
    ``rest_batch_size`` settings): the top ``top_n`` by message count in batches of ``top_size``,
    the rest in batches of ``rest_size``."""

    top_n: int = 50
    top_size: int = 10
    rest_size: int = 50
