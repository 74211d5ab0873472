"""Asset group names and the dynamic partitions of contact batches."""

import dagster as dg

INGEST = "ingest"
PER_BATCH = "per_contact_batch"
STORE = "store"
INSIGHTS = "insights"

contact_batches_partitions = dg.DynamicPartitionsDefinition(name="contact_batches")

DUCKDB_POOL = "brb_duckdb"  # one writer on brb.duckdb at a time (dagster.yaml sets the limit to 1)
