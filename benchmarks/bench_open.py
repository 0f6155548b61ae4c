"""Benchmark: opening an output's views, bound as they are created or at first read.

`fleet_goodput.store.views.connect` (what `mpg sql`, `fleet_goodput.open`, reports
and validation open) creates every view of a run in a fresh in-memory DuckDB.
DuckDB binds a view as it creates it, and binding a mart binds every view it
reads again; where DuckDB can, `connect` defers that to the first query that
reads each view. Both ways run here on the same output, in this process,
alternately: the time to open, and to open and answer a first query.

    .venv/bin/mpg run --input /tmp/fleet --output /tmp/out   # any committed output
    .venv/bin/python benchmarks/bench_open.py /tmp/out

Prints medians and the ratio; not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import duckdb

from fleet_goodput.core.config import load_settings
from fleet_goodput.store.views import create_views

FIRST_QUERY = "select count(*) from goodput_by_team"


def _open(output: str, settings, defer_binding: bool) -> tuple[float, float]:
    """Seconds to create the views, and to answer FIRST_QUERY on them after."""
    started = time.perf_counter()
    with duckdb.connect() as connection:
        create_views(connection, output, settings, defer_binding=defer_binding)
        opened = time.perf_counter()
        connection.execute(FIRST_QUERY).fetchall()
        return opened - started, time.perf_counter() - opened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="a folder `mpg run` has committed a run to")
    parser.add_argument("--repeats", type=int, default=15, help="openings of each kind (default: 15)")
    args = parser.parse_args()
    settings = load_settings()
    _open(args.output, settings, True)  # warm the file cache and the imports
    times = {True: [], False: []}
    for _ in range(args.repeats):
        for defer in (False, True):
            times[defer].append(_open(args.output, settings, defer))
    for defer, label in ((False, "bound as created (baseline)"), (True, "deferred to first read")):
        opened = statistics.median(t[0] for t in times[defer])
        query = statistics.median(t[1] for t in times[defer])
        print(
            f"{label:<28} open {opened * 1000:6.1f} ms   first query {query * 1000:6.1f} ms   "
            f"both {(opened + query) * 1000:6.1f} ms"
        )
    ratio = statistics.median(t[0] for t in times[True]) / statistics.median(t[0] for t in times[False])
    print(f"open, deferred / bound: {ratio:.2f}")


if __name__ == "__main__":
    main()
