"""The chunk store: per-batch Parquet partitions, ``brb.duckdb`` (one writer), its HNSW
and BM25 indexes, and compaction when a contact is forgotten.
"""
