"""fleet-goodput: ML Productivity Goodput for accelerator fleets (specified in docs/metric.md).

The command line is `mpg` (fleet_goodput/cli.py). From Python, for example in
a notebook (fleet_goodput/api.py):

    import fleet_goodput as fg
    fg.simulate("fleet", hours=6, jobs=40)             # a simulated fleet's telemetry
    fg.run("fleet", "out")                              # the pipeline: one committed run
    fg.open("out").sql("select * from fleet_daily").df()

Importing the package loads none of DuckDB, Beam or Great Expectations: each
function imports what it needs when called.
"""

from fleet_goodput.api import open, run, simulate

__version__ = "0.1.0"
__all__ = ["__version__", "open", "run", "simulate"]
