"""brb-pipeline: a local-first pipeline from Apple Messages history to a searchable, clustered archive."""

__version__ = "0.1.0"
