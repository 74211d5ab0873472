"""Core: the pipeline's pure logic, over plain values and files.

Records and handles, contacts and people, chunking, embedding (MLX), the DuckDB store and its
indexes, search ranking, insights, memory prompts, crypto and progress. Functions take explicit
parameters (never a Settings object).

Must not import: dagster, ``config``, ``stages``, ``search``, ``privacy``, ``keys``,
``orchestration``, ``cli`` (``test_layout.py`` enforces it).
"""

#: The random seed every stochastic step uses unless told otherwise (the ``seed`` setting).
SEED = 42
#: ISO 3166 region for phone numbers typed without a country code (the ``default_region`` setting).
DEFAULT_REGION = "US"
