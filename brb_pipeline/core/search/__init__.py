"""Hybrid search over the chunk store: vector and lexical candidates, fusion, merging of
overlapping windows, diversity, and the search log.
"""
