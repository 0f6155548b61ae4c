"""`mpg export openmetrics`: the store's history as OpenMetrics text with timestamps, for backfilling Prometheus.

Every series of fleet_goodput/monitoring/openmetrics.py, sampled at the end of every complete
event-time window, cumulative from the store's first window. `promtool tsdb create-blocks-from
openmetrics FILE DIR` turns the file into Prometheus blocks (docs/monitoring.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from fleet_goodput import console, exits

STDOUT = "-"

EPILOG = """\
examples:
  mpg export openmetrics --output out/ --to goodput.om
  promtool tsdb create-blocks-from openmetrics goodput.om /var/lib/prometheus/metrics2
  mpg export openmetrics --output out/ --since 2026-01-01 | head

what it writes: counters of chip-seconds (fleet_goodput_*_chip_seconds_total), jobs and
interruptions, each sampled at the end of every window (an hour by default) from the store's
first window, or the window holding --since, to the last window that ended by the run's as-of
time. Values are cumulative from the store's first window whatever --since says, so an export
from a later --since continues an earlier one. The increase of a counter over a day is the day's
sum; the ratio of two increases is the day's factor (docs/monitoring.md). The series count is
printed on stderr.

"""

EXIT_CODES = exits.describe(failed="the output holds no committed run", damaged=exits.DAMAGED_MEANING)


TEXTFILE_EPILOG = """\
examples:
  mpg export textfile --output out/ --to /var/lib/prometheus/node-exporter/fleet_goodput.prom

what it writes: what `mpg serve metrics` serves (the counters at the last complete window, the run's
id and as-of time, the last complete day's factors), in Prometheus's text format without timestamps,
for node_exporter's textfile collector (--collector.textfile.directory): run it after each `mpg run`
(cron, or after mpg-daily.service) instead of serving. The file is replaced whole, as the collector
needs.

"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export the store's figures for Prometheus (OpenMetrics, textfile)",
        description="Export an output's figures in another tool's format: `mpg export FORMAT --help` says more.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    formats = parser.add_subparsers(dest="format", metavar="FORMAT", required=True)
    openmetrics = formats.add_parser(
        "openmetrics",
        help="the history as OpenMetrics text with timestamps (for promtool's backfill)",
        description="Write every fleet_goodput_* series of the output's latest run (or --run ID), one "
        "cumulative sample per series at the end of every complete window, as OpenMetrics text "
        "with timestamps: `promtool tsdb create-blocks-from openmetrics` backfills a Prometheus "
        "with it.",
        epilog=EPILOG + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    openmetrics.add_argument(
        "--since",
        metavar="TIME",
        help="first sample at the start of the window holding TIME (ISO-8601: 2026-01-02, "
        "2026-01-02T06:00:00Z; default: the store's first window)",
    )
    textfile = formats.add_parser(
        "textfile",
        help="the latest figures for node_exporter's textfile collector",
        description="Write what `mpg serve metrics` serves, in Prometheus's text format, for node_exporter's "
        "textfile collector.",
        epilog=TEXTFILE_EPILOG + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for each in (openmetrics, textfile):
        each.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run`")
        each.add_argument("--run", type=int, metavar="ID", help="the run to export (default: the latest)")
        each.add_argument(
            "--to",
            default=STDOUT,
            metavar="FILE",
            help="write to FILE, replaced whole once written (default: standard output)",
        )
        each.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.core.timeutil import parse_time_us
    from fleet_goodput.monitoring import openmetrics
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.errors import StoreDamaged, StoreError
    from fleet_goodput.store.views import connect

    command = f"mpg export {args.format}"
    try:
        since_us = None if getattr(args, "since", None) is None else parse_time_us(args.since)
    except ValueError as exc:
        print(f"{command}: --since: {exc}", file=sys.stderr)
        return exits.USAGE
    destination = Path(args.to) if args.to != STDOUT else None
    try:
        with connect(args.output, run=args.run) as connection:
            record = Store.of(args.output).run(args.run)
            if args.format == "openmetrics":
                chunks = openmetrics.history(connection, record.as_of_us, since_us)
            else:
                chunks = [openmetrics.current(connection, record.as_of_us, record.run_id)]
            series, samples = _write(chunks, destination, textfile=args.format == "textfile")
    except StoreDamaged as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return exits.DAMAGED
    except FileNotFoundError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return exits.FAILED
    except (StoreError, ValueError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return exits.USAGE
    console.progress(
        f"{command}: {series:,} series, {samples:,} samples of run {record.run_id}"
        + ("" if destination is None else f" to {destination}")
    )
    return exits.OK


def _write(chunks, destination: Path | None, textfile: bool) -> tuple[int, int]:
    """Write the families as they come (OpenMetrics: one family at a time, then `# EOF`; a textfile: one
    list of them), and return the series and samples written. A file is written beside its name and
    renamed once whole: promtool and node_exporter never read half of one."""
    from fleet_goodput.monitoring import openmetrics

    series = samples = 0
    partial = None if destination is None else destination.with_name(f".{destination.name}.partial")
    if partial is None:
        console.unescaped(sys.stdout).flush()
    with contextlib.nullcontext(sys.stdout.buffer) if partial is None else partial.open("wb") as out:
        for chunk in chunks:
            families = chunk if textfile else [chunk]
            for family in families:
                series += len({(sample.name, tuple(sorted(sample.labels.items()))) for sample in family.samples})
                samples += len(family.samples)
            out.write(openmetrics.text_format(families) if textfile else openmetrics.family_text(chunk))
        if not textfile:
            out.write(openmetrics.EOF)
        out.flush()
    if partial is not None:
        os.replace(partial, destination)
    return series, samples
