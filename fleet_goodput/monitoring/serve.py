"""`/metrics` over HTTP from an output's latest committed run, for Prometheus to scrape (`mpg serve metrics`).

The page is built once per run: each request asks the store which run is the latest (its `runs`
table, read without opening the views) and builds the page again only when another run has
committed since, so a scrape costs a look at the store, and a commit shows at the next scrape.
A run being written is never seen half: the views read the committed run (docs/tables-and-views.md).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fleet_goodput.monitoring import openmetrics
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreError
from fleet_goodput.store.views import connect

CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


class MetricsPage:
    """The OpenMetrics page of an output's latest run, rebuilt when a later run commits."""

    def __init__(self, output: str | Path):
        self.output = output
        self._lock = threading.Lock()
        self._run_id: int | None = None
        self._page = b""

    def page(self) -> tuple[int, bytes]:
        """The run id and the page; raises FileNotFoundError while the output holds no committed run."""
        with self._lock:
            latest = Store.of(self.output).latest()
            if latest is None:
                raise FileNotFoundError(f"no committed run in {self.output} yet")
            if latest.run_id != self._run_id:
                with connect(self.output) as connection:
                    families = openmetrics.current(connection, latest.as_of_us, latest.run_id)
                self._page, self._run_id = openmetrics.exposition(families), latest.run_id
            return self._run_id, self._page


def server(output: str | Path, host: str, port: int) -> ThreadingHTTPServer:
    """An HTTP server answering /metrics (and / with a pointer to it); `serve_forever()` runs it."""
    metrics = MetricsPage(output)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self._answer(404, b"fleet-goodput: the metrics are at /metrics\n", "text/plain; charset=utf-8")
                return
            try:
                _, page = metrics.page()
            except (FileNotFoundError, StoreError) as exc:
                self._answer(503, f"fleet-goodput: {exc}\n".encode(), "text/plain; charset=utf-8")
                return
            self._answer(200, page, CONTENT_TYPE)

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):  # noqa: A002 - the signature of BaseHTTPRequestHandler
            pass  # a scrape every few seconds is not news

    return ThreadingHTTPServer((host, port), Handler)
