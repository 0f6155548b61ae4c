"""The project's documents. Installed as `fleet_goodput.docs` so that metric.md, the metric's
specification, ships with the package: every report carries a copy (fleet_goodput/report/specification.py)."""
