"""The Parquet lake: schemas, stable ids, DuckLake catalog, snapshots and queries."""
