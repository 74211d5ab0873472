"""The insights map: PCA -> UMAP projection (:mod:`.projection`), HDBSCAN clusters
(:mod:`.clustering`), readable labels (:mod:`.labels`), and the offline views that show them
(:mod:`.map`, with the 2-D page in :mod:`.map_page` and the PNG preview in :mod:`.map_png`).
"""
