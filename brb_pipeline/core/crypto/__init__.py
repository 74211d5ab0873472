"""Encryption at rest: sealed files (AES-256-GCM) and the one seam that says which key a home uses.

Every file brb writes under an encrypted home with message text or identities in it goes through
:mod:`.files` (Parquet, JSON, whole SQLite images); DuckDB gets its own key string from
:func:`.files.duckdb_key`. Which key a path takes is answered by a provider that
``keys.provider`` installs (it reads the home's ``encryption.json`` and the OS keychain); with no
provider, or a path outside an encrypted home, files are written in plaintext as before.
"""
