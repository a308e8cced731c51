"""The DuckDB catalog: the adapter registry."""
