"""The output store: Delta tables committed a run at a time, their checks, kept settings, rollback, the DuckDB views over them and the SQL guard."""
