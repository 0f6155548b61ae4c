"""Importers of public telemetry into the Avro streams of the contract (docs/metric.md section 2).

Each module reads one source format into an `Imported` (common.py) with
`read(source, options)`; `mpg import FORMAT SOURCE --out DIR` writes it with
`common.write_import`. What each maps, and what its source cannot tell, is in
the module docstrings and docs/importers.md.
"""

from fleet_goodput.importers import kineto, mgm, mlperf, openb, philly, slurm

IMPORTERS = {module.NAME: module for module in (philly, openb, mlperf, kineto, mgm, slurm)}
