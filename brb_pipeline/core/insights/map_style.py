"""What every view of the map shares: the cluster colours and the one-line subtitle."""

from __future__ import annotations

import polars as pl

NOISE_COLOR = "#c8c8c8"
# Tableau-20-like palette, cycled; noise is always light grey.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
    "#f7b6d2", "#dbdb8d", "#9edae5", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
)


def color(cluster_id: int) -> str:
    """A cluster's colour: the palette cycled, light grey for noise (-1)."""
    return NOISE_COLOR if cluster_id < 0 else PALETTE[cluster_id % len(PALETTE)]


def map_subtitle(df: pl.DataFrame, summary: pl.DataFrame) -> str:
    """One line of counts and dates: ``"1,461 chunks · 24 clusters · 21% unclustered · 2019-01-03 – 2024-05-01"``."""
    clusters = int((summary["cluster_id"] >= 0).sum()) if summary.height else 0
    noise = int((df["cluster_id"] < 0).sum())
    parts = [f"{df.height:,} chunks", f"{clusters} clusters"]
    if df.height:
        parts.append(f"{100 * noise / df.height:.0f}% unclustered")
    days = df.filter(pl.col("date") != "")["date"].str.slice(0, 10)
    if days.len():
        parts.append(f"{days.min()} – {days.max()}")
    return " · ".join(parts)
