"""`mpg sql`: run a query against an output folder's goodput views.

The query comes from the command line, from a file (`-f FILE`) or from
standard input (`-`, or `-f -`), and prints as an aligned table, CSV, JSON or
a Markdown table.

By default the query runs locked down (fleet_goodput/store/sql_guard.py): queries
only, reading files under OUTPUT only, no network, no extensions, no settings.
`--unsafe-allow-writes-and-files` lifts that for an operator who means it.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from decimal import Decimal
from functools import partial
from pathlib import Path

from fleet_goodput import console, exits
from fleet_goodput.core.options import run_number
from fleet_goodput.safe_text import csv_cell, json_text, printable

UNSAFE_FLAG = "--unsafe-allow-writes-and-files"
CSV_RAW_FLAG = "--csv-raw"
FORMATS = ("table", "csv", "json", "markdown")
STDIN = "-"

EPILOG = """\
views: job_goodput, fleet_daily, goodput_by_workload, goodput_by_size_class,
       goodput_by_accelerator, goodput_by_team, goodput_by_framework,
       goodput_by_queue, goodput_by_cluster_queue,
       goodput_by_segment, badput_breakdown, job_window_enriched, capacity_window;
       settings (what the figures were computed with: the output keeps them);
tables: job_window, jobs, capacity_level, rejected, late (OUTPUT/tables/<table>/
        are Delta Lake tables holding the latest row of each key; --run ID
        reads the Delta versions that run left).

examples:
  mpg sql --output out/ "select * from fleet_daily"
  mpg sql --output out/ -f queries/worst_jobs.sql --format markdown
  echo "select * from fleet_daily" | mpg sql --output out/ -
  mpg sql --output out/ --format csv "select job_id, mpg from job_goodput order by lost_chip_s desc limit 10"
  mpg sql --output out/ "select reason, sum(records) from rejected group by reason"

safety: queries run read-only and read files under OUTPUT only (DuckDB's
enable_external_access = false with allowed_directories = [OUTPUT], extension
install/load off, configuration locked); COPY, EXPORT, ATTACH, INSTALL, SET,
CREATE and other statements are refused. --unsafe-allow-writes-and-files runs
the SQL with DuckDB's defaults instead: any statement, any file the user can
reach, the network, extension installs. See docs/threat-model.md.

numbers: the table and markdown formats print integers whole and floats in
fixed decimals per column (as many as the column's values need, up to 6: a
chip-second is a whole number of chip-microseconds), thousands grouped in
columns that reach 10,000; csv and json print every digit, ungrouped.

text: control characters in values (a terminal escape sequence in a team or
a file name) print as \\xNN, e.g. ESC as \\x1b, in every format but json,
which keeps JSON's own escapes (\\u001b): json gives the exact value. csv
cells that start like a spreadsheet formula (= + - @) get a leading ', as in
the report's CSVs; --csv-raw writes every value as it is (for a program, not
a terminal or a spreadsheet).

""" + exits.describe(damaged=exits.DAMAGED_MEANING)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sql",
        help="query the goodput views with DuckDB SQL",
        description="Run SQL (the argument, -f FILE, or standard input with `-`) against the views of an output's latest "
        "committed run (or of --run ID) and print the result. While a run "
        "or `mpg stream` is writing, the previous run is what you see. The "
        "query runs read-only and reads files under OUTPUT only (see below).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run`")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="how to print rows: an aligned table (default), csv, json, or a markdown table",
    )
    parser.add_argument(
        CSV_RAW_FLAG,
        action="store_true",
        help="with --format csv: write values exactly as stored, without showing control characters "
        "as \\xNN or quoting cells that start like a spreadsheet formula (= + - @)",
    )
    parser.add_argument(
        "--run",
        type=run_number,
        metavar="ID",
        help="read the snapshot of an earlier run (`mpg runs` lists them; default: the latest)",
    )
    parser.add_argument(
        UNSAFE_FLAG,
        dest="unsafe",
        action="store_true",
        help="lift the lock-down: allow any statement (COPY, EXPORT, ATTACH, INSTALL, SET, ...), "
        "files outside OUTPUT and the network",
    )
    parser.add_argument("-f", "--file", metavar="FILE", help="read the SQL from FILE (`-`: from standard input)")
    parser.add_argument(
        "query",
        nargs="?",
        help="the SQL (`-`: read it from standard input); with several statements, the last one's rows are printed",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import duckdb

    from fleet_goodput.store.errors import StoreDamaged, StoreError
    from fleet_goodput.store.sql_guard import QueryRefused, lock_down, read_only_statements
    from fleet_goodput.store.store_check import damage_behind
    from fleet_goodput.store.views import connect

    if args.csv_raw and args.format != "csv":
        print(f"mpg sql: {CSV_RAW_FLAG} goes with --format csv only", file=sys.stderr)
        return exits.USAGE
    try:
        query = read_query(args.query, args.file)
    except QueryError as exc:
        print(f"mpg sql: {exc}", file=sys.stderr)
        return exits.USAGE
    try:
        # The connection the views go into parses the query first: one DuckDB start, not two.
        fresh = duckdb.connect()
        statements = fresh.extract_statements(query) if args.unsafe else read_only_statements(query, fresh)
        if not statements:
            print("mpg sql: no SQL statement given", file=sys.stderr)
            return exits.USAGE
        with connect(args.output, run=args.run, connection=fresh) as connection:
            if not args.unsafe:
                lock_down(connection, [args.output])
            for statement in statements:
                cursor = connection.execute(statement)
            if cursor.description is None:
                return exits.OK
            columns, rows = [d[0] for d in cursor.description], cursor.fetchall()
    except QueryRefused as exc:
        print(f"mpg sql: {exc}. {UNSAFE_FLAG} lifts this.", file=sys.stderr)
        return exits.USAGE
    except duckdb.PermissionException as exc:
        print(
            f"mpg sql: refused: {exc}\n(mpg sql reads files under {args.output} only, with no network and no "
            f"extensions; {UNSAFE_FLAG} lifts this.)",
            file=sys.stderr,
        )
        return exits.USAGE
    except StoreDamaged as exc:
        print(f"mpg sql: {exc}", file=sys.stderr)
        return exits.DAMAGED
    except duckdb.Error as exc:
        damaged = damage_behind(args.output, args.run, exc)
        print(f"mpg sql: {damaged or exc}", file=sys.stderr)
        return exits.DAMAGED if damaged else exits.USAGE
    except (FileNotFoundError, StoreError) as exc:
        print(f"mpg sql: {exc}", file=sys.stderr)
        return exits.USAGE
    if args.format == "csv":
        _write_csv(columns, rows, raw=args.csv_raw)
    elif args.format == "json":
        print(json_text([dict(zip(columns, row)) for row in rows], default=str, indent=2))
    elif args.format == "markdown":
        print(_markdown(columns, rows))
    else:
        print(_table(columns, rows))
    return exits.OK


class QueryError(ValueError):
    """No query, two of them, or a query file that cannot be read."""


def read_query(query: str | None, file: str | None) -> str:
    """The SQL text from the argument, `-f FILE`, or standard input (`-` for either)."""
    if (query is None) == (file is None):
        raise QueryError(
            "give the SQL either as an argument or with -f FILE (`-` reads standard input), not "
            + ("both" if query is not None else "neither")
        )
    source = file if file is not None else query
    if source == STDIN:
        return sys.stdin.read()
    if file is None:
        return query
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QueryError(f"cannot read the SQL file {file}: {exc}") from exc


def _write_csv(columns: list[str], rows: list[tuple], raw: bool) -> None:
    cell = (lambda value: value) if raw else csv_cell
    # Past console's escaping stream: it would show the CR of CSV's CRLF, and --csv-raw means what it writes.
    writer = csv.writer(console.unescaped(sys.stdout))
    writer.writerow([cell(name) for name in columns])
    writer.writerows([cell(value) for value in row] for row in rows)


def _table(columns: list[str], rows: list[tuple]) -> str:
    cells, numeric = _cells(columns, rows)
    columns = [printable(name) for name in columns]
    cells = [[printable(cell) for cell in row] for row in cells]
    widths = [max([len(name)] + [len(row[i]) for row in cells]) for i, name in enumerate(columns)]
    lines = [
        "  ".join(
            name.rjust(width) if right else name.ljust(width) for name, width, right in zip(columns, widths, numeric)
        ),
        "  ".join("-" * width for width in widths),
    ]
    lines += [
        "  ".join(cell.rjust(width) if right else cell.ljust(width) for cell, width, right in zip(row, widths, numeric))
        for row in cells
    ]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


def _markdown(columns: list[str], rows: list[tuple]) -> str:
    """A GitHub-flavoured Markdown table; numeric columns align right."""
    cells, numeric = _cells(columns, rows)
    lines = [
        "| " + " | ".join(_markdown_cell(name) for name in columns) + " |",
        "|" + "|".join("---:" if right else "---" for right in numeric) + "|",
    ]
    lines += ["| " + " | ".join(_markdown_cell(cell) for cell in row) + " |" for row in cells]
    return "\n".join(lines)


def _markdown_cell(text: str) -> str:
    # A pipe would end the cell and a line break the row; other control characters show as \xNN.
    text = printable(text.replace("\r\n", "\n"), keep_newlines=True)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")


# Floats print with as many decimals as the column's values need, up to this many: a chip-second
# is an integer number of chip-microseconds, so six decimals show it exactly, and what lies below
# is the rounding of sums. CSV and JSON print every digit.
MAX_DECIMALS = 6
# Integer parts group their thousands in a column that holds a value this big (not in one of years).
GROUP_FROM = 10_000


def _cells(columns: list[str], rows: list[tuple]) -> tuple[list[list[str]], list[bool]]:
    """Every value as text, and which columns are numeric (they align right). Numbers read exactly:
    integers whole, floats in fixed decimals chosen per column, thousands grouped; never an exponent
    but for a value too small for the column's decimals."""
    formats, numeric = [], []
    for i in range(len(columns)):
        values = [row[i] for row in rows if row[i] is not None]
        numbers = bool(rows) and all(_is_number(v) for v in values)  # all NULL: a number column too
        finite = [float(v) for v in values if numbers and math.isfinite(v)]
        decimals = max((_decimals(v) for v in values if isinstance(v, float) and math.isfinite(v)), default=0)
        group = "," if any(abs(v) >= GROUP_FROM for v in finite) else ""
        formats.append(partial(_number, decimals=decimals, group=group) if numbers else _text)
        numeric.append(numbers)
    return [[fmt(value) for fmt, value in zip(formats, row)] for row in rows], numeric


def _is_number(value) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def _decimals(value: float) -> int:
    """The decimals `value` needs, up to MAX_DECIMALS."""
    exponent = Decimal(repr(round(value, MAX_DECIMALS))).normalize().as_tuple().exponent
    return max(0, -exponent)


def _number(value, decimals: int, group: str) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and round(value, decimals) == 0:
            return repr(value)  # too small for the column's decimals: show it, not 0
        return f"{value:{group}.{decimals}f}"
    return f"{value:{group}}" if isinstance(value, int) else f"{value:{group}f}"


def _text(value) -> str:
    return "NULL" if value is None else str(value)
