"""A real Prometheus 2.42 (Debian's package) for the tests (tests/monitoring/test_prometheus.py).

`ensure_installed()` installs the `prometheus` package with apt-get when it is missing and this
process is root (tests/debian_packages.py); it returns why it could not, so the tests are skipped
saying so. `PrometheusBox(folder).start()` runs the binary as a child process on the
loopback with its own configuration and TSDB folder; `stop()` ends it by its process id.
`backfill(file)` loads an OpenMetrics file with `promtool tsdb create-blocks-from openmetrics`
before the start.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import debian_packages

BINARIES = ("prometheus", "promtool")


def missing_binaries() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None]


def ensure_installed() -> str | None:
    """None once the packages are installed, else why they cannot be."""
    return debian_packages.ensure_installed("Prometheus", ("prometheus",), missing_binaries)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def promtool(*arguments: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *arguments], capture_output=True, text=True, timeout=timeout)


class PrometheusBox:
    def __init__(self, folder: Path, scrape_targets: tuple[str, ...] = ()):
        self.folder = folder
        self.tsdb = folder / "tsdb"
        self.port = free_port()
        self.scrape_targets = scrape_targets
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def backfill(self, openmetrics_file: Path) -> None:
        done = promtool("tsdb", "create-blocks-from", "openmetrics", str(openmetrics_file), str(self.tsdb))
        assert done.returncode == 0, f"promtool backfill failed: {done.stderr[-2000:]}"

    def start(self) -> PrometheusBox:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "fleet-goodput", "static_configs": [{"targets": list(self.scrape_targets)}]}
            ],
        }
        (self.folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        log = (self.folder / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.tsdb}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=100y",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.folder / "prometheus.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"Prometheus never became ready: {(self.folder / 'prometheus.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def query(self, expr: str, at_s: float | None = None) -> list[dict]:
        """The result vector of an instant query (at `at_s`, seconds since the epoch)."""
        arguments = {"query": expr} | ({} if at_s is None else {"time": str(at_s)})
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode(arguments)}", timeout=30
        ) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def query_range(self, expr: str, start_s: float, end_s: float, step_s: float) -> list[dict]:
        arguments = {"query": expr, "start": str(start_s), "end": str(end_s), "step": str(step_s)}
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(arguments)}", timeout=30
        ) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]
