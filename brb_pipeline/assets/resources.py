"""Dagster resources: the settings and the in-process runtime (progress, cancel, embedder cache)."""


import os
from typing import Any

import dagster as dg

from brb_pipeline.core.progress import CancelToken, LoggerSink, Progress
from brb_pipeline.settings import Settings


class BrbSettings(dg.ConfigurableResource):
    """Where the pipeline lives. Empty ``home`` means ``BRB_HOME`` or ``~/.brb``; the sources and
    options come from ``<home>/config.json`` (written by ``brb ingest``) and ``BRB_*`` variables."""

    home: str = ""

    def load(self) -> Settings:
        return Settings.load(self.home or os.environ.get("BRB_HOME") or None)


class Runtime:
    """Live objects an in-process run shares across assets: progress sinks, the cancel token and
    one loaded embedder (loading the model once per process, not once per partition)."""

    def __init__(self, progress: Progress | None = None, cancel: CancelToken | None = None,
                 embedder: Any | None = None) -> None:
        self.progress = progress or Progress()
        self.cancel = cancel or CancelToken()
        self._embedder = embedder
        self.embed_progress = None  # batch -> callback(done, total), set by the headless runner
        self.reembed = False  # ignore vectors of unchanged chunks (brb ingest --reembed)

    def embedder(self, s: Settings) -> Any:
        """The embedder given at construction, else the process's one for ``s`` (loaded once)."""
        if self._embedder is not None:
            return self._embedder
        from brb_pipeline.core.embedding.models import load_embedder

        return load_embedder(s)

    def progress_for(self, context: dg.AssetExecutionContext) -> Progress:
        """The shared progress, plus the run's Dagster log when nothing else is listening."""
        if self.progress.sinks:
            return self.progress
        return Progress([LoggerSink(context.log)])


def runtime_resource(runtime: Runtime | None = None) -> dg.ResourceDefinition:
    return dg.ResourceDefinition.hardcoded_resource(runtime or Runtime(), "in-process runtime")
