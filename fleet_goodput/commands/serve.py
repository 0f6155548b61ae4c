"""`mpg serve metrics`: serve /metrics (OpenMetrics) from an output's latest committed run, for Prometheus."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from fleet_goodput import console, exits

DEFAULT_HOST = "127.0.0.1"
# A port among those exporters use (9100-9999), free of the common ones (node_exporter 9100, Pushgateway 9091).
DEFAULT_PORT = 9464

EPILOG = f"""\
examples:
  mpg serve metrics --output out/                       # http://{DEFAULT_HOST}:{DEFAULT_PORT}/metrics
  mpg serve metrics --output out/ --host 0.0.0.0 --port 9464

what it serves: the counters of `mpg export openmetrics` at the last complete window of the latest
run (without timestamps: Prometheus stamps them when it scrapes), the run's id and as-of time, and
gauges of the last complete UTC day's SG, RG, PG, MPG and PG coverage per cluster and accelerator,
for the fleet and per segment (docs/monitoring.md). A run that commits shows at the next scrape;
while a run is writing, the previous one is served. Before the first run, /metrics answers 503.
SIGTERM or Ctrl-C stops it (exit 0).

"""

EXIT_CODES = exits.describe()


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve the store's figures over HTTP (Prometheus /metrics)",
        description="Serve an output's figures over HTTP: `mpg serve metrics --help` says more.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = parser.add_subparsers(dest="kind", metavar="WHAT", required=True)
    metrics = kinds.add_parser(
        "metrics",
        help="serve /metrics for Prometheus from the latest committed run",
        description="Serve /metrics, OpenMetrics text of the latest committed run of OUTPUT, rebuilt when a run "
        "commits.",
        epilog=EPILOG + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    metrics.add_argument("--output", required=True, metavar="DIR", help="an output folder of `mpg run` or `mpg stream`")
    metrics.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"the address to listen on (default: {DEFAULT_HOST}, this machine only; 0.0.0.0 for every interface)",
    )
    metrics.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"the port (default: {DEFAULT_PORT})")
    metrics.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from fleet_goodput.monitoring.serve import server

    if not 0 < args.port < 65536:
        print(f"mpg serve metrics: --port {args.port} is not a port (1 to 65535)", file=sys.stderr)
        return exits.USAGE
    try:
        httpd = server(args.output, args.host, args.port)
    except OSError as exc:
        print(f"mpg serve metrics: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return exits.USAGE
    for sig in (signal.SIGINT, signal.SIGTERM):
        # shutdown() waits for serve_forever to return, so it runs beside it, not in the handler's frame.
        signal.signal(sig, lambda *_: threading.Thread(target=httpd.shutdown, daemon=True).start())
    host, port = httpd.server_address[:2]
    console.progress(f"mpg serve metrics: serving http://{host}:{port}/metrics from {args.output}")
    with httpd:
        httpd.serve_forever()
    return exits.OK
