"""Sentence embeddings with MLX: the embedder spec and its one-per-process cache (``spec``,
``models``), the device choice, the CPU fast path (``fast_bert``: OpenBLAS GEMMs in two streams,
with the BLAS wiring of ``blas``), the GPU forward (``gpu_bert``), checkpoint loading with
quantized weights (``weights``), the weight digests kept between processes
(``digest``) and the hash stand-in for tests (``hashing``).
"""
