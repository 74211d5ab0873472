"""Stage functions: the whole pipeline as plain functions over a Settings object.

Each stage reads its inputs from the home dir (snapshot, staging Parquet, brb.db, brb.duckdb),
writes its outputs there, and returns a dict of text-free metadata. Dagster assets are thin
wrappers around these functions; nothing here imports dagster.
"""
