"""Search as a service over one home: :mod:`.query` (the ``Searcher`` a session keeps open, the
one-shot ``run_search_cold``) and :mod:`.hit_files` (the files a hit's messages carry).

The ranking itself (BM25, HNSW, fusion, dates, routing) is pure and lives in ``core.search``.
Must not import: dagster, ``orchestration``, ``cli``.
"""
