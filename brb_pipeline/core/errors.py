"""Errors a user can act on. Each message is one line that says what to do next."""

from __future__ import annotations


class BrbError(Exception):
    """Base class: the CLI prints ``str(error)`` and exits non-zero."""

    exit_code = 2


class SourceError(BrbError):
    """A source (chat.db, AddressBook, WhatsApp store) cannot be read as asked."""


class SourceMissingError(SourceError):
    """The path does not exist."""


class NotADatabaseError(SourceError):
    """The file exists but is not an SQLite database."""


class UnknownSchemaError(SourceError):
    """The database lacks tables or columns this reader needs."""


class DatabaseLockedError(SourceError):
    """The database is locked by another process (e.g. Messages is writing)."""


class StoreError(BrbError):
    """brb.db / brb.duckdb / an index is missing or damaged."""


class EncryptionKeyError(StoreError):
    """An encrypted home's key is missing, wrong, or cannot be read where it is kept."""


class SettingsError(BrbError):
    """The home dir, its config.json or a setting's value cannot be used as given."""


class CheckFailedError(BrbError):
    """An asset check of ERROR severity failed: the run failed and the previous store is kept."""


class CancelledError(BrbError):
    """The run was cancelled by the user; earlier complete results are intact."""

    exit_code = 130
