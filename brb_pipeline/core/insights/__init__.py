"""The insights map: PCA -> UMAP projection, HDBSCAN clusters, readable labels, and the
offline pages and preview that show them.
"""
