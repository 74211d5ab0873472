"""Dagster resources: the settings and the in-process runtime (progress, cancel, embedder cache).

Assets take them as typed parameters: ``brb: BrbSettings`` (configurable: the home dir) and
``runtime: dg.ResourceParam[Runtime]`` (live objects, passed as they are).
"""


import os
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from brb_pipeline.core.progress import CancelToken, LoggerSink, Progress
from brb_pipeline.stages.batch_progress import BatchProgress
from brb_pipeline.config.settings import Settings, absolute, default_home


class BrbSettings(dg.ConfigurableResource):
    """Where the pipeline lives. Empty ``home`` means ``BRB_HOME`` or ``~/.brb``; the sources and
    options come from ``<home>/config.json`` (written by ``brb ingest``) and ``BRB_*`` variables."""

    home: str = ""
    _lock: Any = PrivateAttr(default=None)

    def load(self) -> Settings:
        return Settings.load(self.home or os.environ.get("BRB_HOME") or None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Hold the home's writer lock while a run (or, in the UI's multiprocess runs, a step)
        uses the home: runs from the UI and its automation wait for a CLI ingest and the
        CLI waits for them (re-entrant inside a CLI ingest, which already holds it)."""
        from brb_pipeline.stages.homelock import hold

        home = absolute(self.home) if self.home else (absolute(os.environ["BRB_HOME"]) if os.environ.get("BRB_HOME")
                                                       else default_home())
        log = context.log.warning if context.log is not None else None
        self._lock = hold(home, what="Dagster run", on_wait=log)
        self._lock.__enter__()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.__exit__(None, None, None)


class Runtime:
    """Live objects an in-process run shares across assets: progress sinks, the cancel token,
    one loaded embedder (loading the model once per process, not once per partition) and the
    progress of the run's batch loop.

    Args:
        reembed: ignore the vectors of unchanged chunks (``brb ingest --reembed``).
        generator: the distilled memory's text generator (tests pass a scripted one).
        run_tags: tags on every Dagster run the runner starts (a UI backfill's children carry
            ``brb/source: ui`` and their parent run's id).
    """

    def __init__(self, progress: Progress | None = None, cancel: CancelToken | None = None,
                 embedder: Any | None = None, *, reembed: bool = False, generator: Any | None = None,
                 run_tags: dict[str, str] | None = None) -> None:
        self.progress = progress or Progress()
        self.run_tags = dict(run_tags or {})  # added to every Dagster run the headless runner starts
        self.cancel = cancel or CancelToken()
        self.reembed = reembed
        self.batches = BatchProgress(self.progress)  # planned by the headless runner; idle in the UI
        self._embedder = embedder
        self._generator = generator

    def embedder(self, s: Settings) -> Any:
        """The embedder given at construction, else the process's one for ``s`` (loaded once)."""
        if self._embedder is not None:
            return self._embedder
        from brb_pipeline.core.embedding.models import load_embedder

        return load_embedder(s.embedding)

    def generator(self, s: Settings) -> Any | None:
        """The memory's text generator given at construction, else ``llm_model_path``'s (None
        when no model is configured)."""
        if self._generator is not None:
            return self._generator
        from brb_pipeline.stages.memory import load_generator

        return load_generator(s)

    def progress_for(self, context: dg.AssetExecutionContext) -> Progress:
        """The shared progress, plus the run's Dagster log when nothing else is listening."""
        if self.progress.sinks:
            return self.progress
        return Progress([LoggerSink(context.log)])

