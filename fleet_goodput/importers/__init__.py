"""Importers of public telemetry into the Avro streams of the contract (docs/metric.md section 2).

Each module reads one source format into an `Imported` (common.py) with
`read(source, options)` (`source` a list of paths where the module sets
MANY_SOURCES); `mpg import FORMAT SOURCE… --out DIR` writes it with
`import_folder.write_import`. What each maps, and what its source cannot tell, is in
the module docstrings and docs/importers.md.
"""

from fleet_goodput.importers import job, kineto, kubernetes, logs, mgm, mlperf, openb, orbax, philly, slurm

IMPORTERS = {
    module.NAME: module for module in (philly, openb, mlperf, kineto, mgm, logs, orbax, kubernetes, slurm, job)
}
