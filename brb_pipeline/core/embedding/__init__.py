"""Sentence embeddings with MLX: the embedder spec and cache, the CPU fast path
(OpenBLAS GEMMs in two streams), and the BLAS wiring it needs on Linux.
"""
