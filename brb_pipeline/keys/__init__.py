"""Keys: the encrypted home's data key (:mod:`.provider`), where it is kept (:mod:`.keystore`:
the OS keychain or ``BRB_KEY``) and changing it (:mod:`.rekey`).

Nothing is installed on import. Each entry point (the ``brb`` command, the Dagster code location
``orchestration.definitions``, a test session) calls :func:`install` once, so that
``core.crypto.files`` opens a home's files with the home's key; until then reading or writing a
file through ``core.crypto`` raises.

Must not import: dagster, ``orchestration``, ``cli``, ``stages``.
"""

from brb_pipeline.keys.provider import install

__all__ = ["install"]
