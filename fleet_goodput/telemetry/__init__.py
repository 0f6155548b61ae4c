"""Telemetry files: reading and validating Avro in rows and in columns, writing it, and recording it from a training loop."""
