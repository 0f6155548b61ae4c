"""`mpg sql`: run a query against an output folder's goodput views.

By default the query runs locked down (fleet_goodput/sql_guard.py): queries
only, reading files under OUTPUT only, no network, no extensions, no settings.
`--unsafe-allow-writes-and-files` lifts that for an operator who means it.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

import duckdb

from fleet_goodput.sql_guard import QueryRefused, lock_down, read_only_statements
from fleet_goodput.store import StoreError
from fleet_goodput.views import connect

UNSAFE_FLAG = "--unsafe-allow-writes-and-files"

EPILOG = """\
views: job_goodput, fleet_daily, goodput_by_workload, goodput_by_size_class,
       goodput_by_accelerator, goodput_by_team, goodput_by_framework,
       goodput_by_segment, badput_breakdown, job_window_enriched;
tables: job_window, jobs, capacity_window, rejected, late (latest versions;
        OUTPUT/tables/<table>/ are Delta Lake tables holding every version).

examples:
  mpg sql --output out/ "select * from fleet_daily"
  mpg sql --output out/ --format csv "select job_id, mpg from job_goodput order by lost_chip_s desc limit 10"
  mpg sql --output out/ "select reason, sum(records) from rejected group by reason"

safety: queries run read-only and read files under OUTPUT only (DuckDB's
enable_external_access = false with allowed_directories = [OUTPUT], extension
install/load off, configuration locked); COPY, EXPORT, ATTACH, INSTALL, SET,
CREATE and other statements are refused. --unsafe-allow-writes-and-files runs
the SQL with DuckDB's defaults instead: any statement, any file the user can
reach, the network, extension installs. See docs/threat-model.md.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("sql", help="query the goodput views with DuckDB SQL",
                                   description="Run one SQL query against the views of an output's latest "
                                               "committed run (or of --run ID) and print the result. While a run "
                                               "or `mpg stream` is writing, the previous run is what you see. The "
                                               "query runs read-only and reads files under OUTPUT only (see below).",
                                   epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run`")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table", help="how to print rows (default: table)")
    parser.add_argument("--run", type=int, metavar="ID",
                        help="read the snapshot of an earlier run (`mpg runs` lists them; default: the latest)")
    parser.add_argument(UNSAFE_FLAG, dest="unsafe", action="store_true",
                        help="lift the lock-down: allow any statement (COPY, EXPORT, ATTACH, INSTALL, SET, ...), "
                             "files outside OUTPUT and the network")
    parser.add_argument("query", help="the SQL query")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        statements = duckdb.extract_statements(args.query) if args.unsafe else read_only_statements(args.query)
        if not statements:
            print("mpg sql: no SQL statement given", file=sys.stderr)
            return 2
        with connect(args.output, run=args.run) as connection:
            if not args.unsafe:
                lock_down(connection, [args.output])
            for statement in statements:
                cursor = connection.execute(statement)
            if cursor.description is None:
                return 0
            columns, rows = [d[0] for d in cursor.description], cursor.fetchall()
    except QueryRefused as exc:
        print(f"mpg sql: {exc}. {UNSAFE_FLAG} lifts this.", file=sys.stderr)
        return 2
    except duckdb.PermissionException as exc:
        print(f"mpg sql: refused: {exc}\n(mpg sql reads files under {args.output} only, with no network and no "
              f"extensions; {UNSAFE_FLAG} lifts this.)", file=sys.stderr)
        return 2
    except (FileNotFoundError, StoreError, duckdb.Error) as exc:
        print(f"mpg sql: {exc}", file=sys.stderr)
        return 2
    if args.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    elif args.format == "json":
        print(json.dumps([dict(zip(columns, row)) for row in rows], default=str, indent=2))
    else:
        print(_table(columns, rows))
    return 0


def _table(columns: list[str], rows: list[tuple]) -> str:
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(columns)]
    lines = ["  ".join(name.ljust(width) for name, width in zip(columns, widths)),
             "  ".join("-" * width for width in widths)]
    lines += ["  ".join(cell.rjust(width) if _numeric(cell) else cell.ljust(width) for cell, width in zip(row, widths))
              for row in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _numeric(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
