"""Privacy: ``brb forget`` and ``brb delete``, and everything that makes "deleted" true on disk.

- :mod:`.forget`: forget people or handles, delete a whole home;
- :mod:`.forget_journal`: a forget's plan, written first, so a killed forget finishes on the next run;
- :mod:`.forgotten`: who was forgotten, so a re-ingest does not bring them back;
- :mod:`.scrub`, :mod:`.scrub_emlx`: rewrite the snapshot's copies of the sources without them.

Must not import: dagster, ``orchestration``, ``cli``.
"""
