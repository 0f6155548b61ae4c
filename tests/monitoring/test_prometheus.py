"""Goodput in a real Prometheus: backfilled from `mpg export openmetrics`, queried through its HTTP API.

A small simulated fleet (28 hours, so 2026-01-01 is a complete day) is run, exported and
backfilled with `promtool tsdb create-blocks-from openmetrics` into a Prometheus 2.42 (Debian's
package, tests/prometheus_box.py) started once for the module. Every recording rule of
deploy/prometheus/ over one day, run as a query at the day's end, must give `mpg sql`'s figure
for that day to 1e-9 relative (and no figure where the store's is unknown); the 1-hour rules give
fleet_by_window's. Conservation holds in PromQL, the counters' totals equal the raw table's sums,
and the number of series stays within the bound docs/monitoring.md states.
"""

from __future__ import annotations

import contextlib
import shutil
import functools
import json
import math
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

import prometheus_box
from fleet_goodput.cli import main

pytestmark = pytest.mark.slow  # a pipeline run and a Prometheus started

REPOSITORY = Path(__file__).resolve().parents[2]
RULES = REPOSITORY / "deploy" / "prometheus" / "fleet-goodput.rules.yml"
RULES_TEST = REPOSITORY / "deploy" / "prometheus" / "fleet-goodput.rules.test.yml"
GRAFANA = REPOSITORY / "deploy" / "grafana"
RELATIVE = 1e-9
DAY = "2026-01-01"
DAY_END_S = 1767225600 + 86_400  # 2026-01-02T00:00:00Z
AS_OF_S = 1767225600 + 28 * 3600
CUT_S = 1767225600 + 20 * 3600  # the first run's as-of time


@functools.cache
def _views(output: Path):
    import fleet_goodput

    return fleet_goodput.open(output)  # the views `mpg sql` queries, opened once for the module


def mpg_sql(output: Path, query: str) -> list[dict]:
    cursor = _views(output).execute(query)
    columns = [column[0] for column in cursor.description]
    return [dict(zip(columns, row)) for row in cursor.fetchall()]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> dict:
    """The fleet in two runs, as telemetry arrives: to 20:00 on the first day, then to the end."""
    from fleet_goodput.api import simulate
    from fleet_goodput.telemetry.avro_io import split_by_time

    root = tmp_path_factory.mktemp("prometheus")
    simulate(root / "fleet", seed=5, hours=28, jobs=16, node_failures=True)
    first, rest = split_by_time(root / "fleet", [(CUT_S) * 1_000_000], root / "arrivals")
    for part, as_of_s in ((first, CUT_S), (rest, AS_OF_S)):
        assert (
            main(
                [
                    "-q",
                    "run",
                    "--input",
                    str(part),
                    "--output",
                    str(root / "out"),
                    "--as_of",
                    datetime.fromtimestamp(as_of_s, timezone.utc).isoformat(),
                ]
            )
            == 0
        )
    assert main(["-q", "export", "openmetrics", "--output", str(root / "out"), "--to", str(root / "history.om")]) == 0
    return {"root": root, "output": root / "out", "history": root / "history.om"}


@contextlib.contextmanager
def serving(output: Path):
    """`mpg serve metrics` on a free loopback port, in a process of its own; yields its /metrics URL."""
    port = prometheus_box.free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleet_goodput.cli",
            "-q",
            "serve",
            "metrics",
            "--output",
            str(output),
            "--port",
            str(port),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "mpg serve metrics never answered"
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0  # SIGTERM stops it cleanly


@pytest.fixture(scope="module")
def served(store):
    with serving(store["output"]) as url:
        yield url


@pytest.fixture(scope="module")
def prometheus(store, served):
    reason = prometheus_box.ensure_installed()
    if reason:
        pytest.skip(f"NO PROMETHEUS: {reason}")
    target = urllib.parse.urlsplit(served).netloc
    box = prometheus_box.PrometheusBox(store["root"] / "prometheus", scrape_targets=(target,))
    box.folder.mkdir()
    box.backfill(store["history"])
    box.start()
    yield box
    box.stop()


def _rules(window: str) -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {
        rule["record"]: rule["expr"] for group in groups if group["name"].endswith(window) for rule in group["rules"]
    }


def _close(found: float, expected: float) -> bool:
    return math.isclose(found, expected, rel_tol=RELATIVE, abs_tol=1e-12)


def _by_labels(result: list[dict], labels: tuple[str, ...]) -> dict[tuple, float]:
    return {tuple(sample["metric"].get(name) for name in labels): float(sample["value"][1]) for sample in result}


def _compare(found: dict[tuple, float], expected: dict[tuple, float | None], what: str) -> None:
    known = {key: value for key, value in expected.items() if value is not None}
    assert set(found) == set(known), f"{what}: Prometheus has {sorted(found)}, the store {sorted(known)}"
    wrong = {key: (found[key], value) for key, value in known.items() if not _close(found[key], value)}
    assert not wrong, f"{what}: (PromQL, mpg sql) differ: {wrong}"


# level of a rule → the labels it keeps and the dimension of segment_daily it matches (None: capacity base)
LEVELS = {
    "fleet": ((), None),
    "cluster_accelerator": (("cluster", "accelerator"), None),
    "team": (("team",), "team"),
    "queue": (("queue",), "queue"),
    "cluster_queue": (("cluster_queue",), "cluster_queue"),
    "workload": (("workload",), "workload"),
    "size_class": (("size_class",), "size_class"),
    "accelerator": (("accelerator",), "accelerator"),
}


def _expected_day(output: Path, level: str, factor: str) -> dict[tuple, float | None]:
    labels, dimension = LEVELS[level]
    if dimension is not None:
        rows = mpg_sql(
            output, f"select segment, {factor} from segment_daily where day = '{DAY}' and dimension = '{dimension}'"
        )
        return {(row["segment"],): row[factor] for row in rows}
    if labels:
        rows = mpg_sql(output, f"select cluster, accelerator, {factor} from fleet_daily where day = '{DAY}'")
        return {(row["cluster"], row["accelerator"]): row[factor] for row in rows}
    # The whole fleet: the ratios of the day's sums, worked out here (docs/metric.md section 1).
    [sums] = mpg_sql(
        output,
        f"""select sum(capacity_chip_s) as capacity, sum(all_allocated_chip_s) as all_allocated,
                                        sum(productive_chip_s) as productive, sum(ideal_chip_s) as ideal,
                                        sum(profiled_productive_chip_s) as profiled
                                 from fleet_daily where day = '{DAY}'""",
    )
    sg, rg, pg = (
        sums["all_allocated"] / sums["capacity"],
        sums["productive"] / sums["all_allocated"],
        sums["ideal"] / sums["profiled"],
    )
    return {(): {"sg": sg, "rg": rg, "pg": pg, "mpg": sg * rg * pg}[factor]}


def test_each_rule_over_a_day_gives_the_store_s_figure_for_that_day(store, prometheus):
    rules = _rules("_1d")
    assert len(rules) == len(LEVELS) * 4
    for record, expr in rules.items():
        level, metric, _ = record.split(":")
        factor = metric.removeprefix("fleet_goodput_")
        found = _by_labels(prometheus.query(expr, DAY_END_S), LEVELS[level][0])
        _compare(found, _expected_day(store["output"], level, factor), record)


def test_the_hour_rules_give_fleet_by_window(store, prometheus):
    rules = _rules("_1h")
    hour_start = "2026-01-01T13:00:00Z"
    rows = mpg_sql(
        store["output"],
        f"select cluster, accelerator, sg, rg, pg, mpg from fleet_by_window where window_start = '{hour_start}'",
    )
    assert rows
    for factor in ("sg", "rg", "pg", "mpg"):
        found = _by_labels(
            prometheus.query(rules[f"cluster_accelerator:fleet_goodput_{factor}:ratio_1h"], 1767225600 + 14 * 3600),
            ("cluster", "accelerator"),
        )
        _compare(found, {(row["cluster"], row["accelerator"]): row[factor] for row in rows}, f"{factor} 1h")


def test_counters_hold_the_raw_tables_sums_and_conserve(store, prometheus):
    [raw] = mpg_sql(
        store["output"],
        f"""
        select sum(lifetime_chip_s) as lifetime, sum(productive_chip_s) as productive, sum(pending_chip_s) as pending,
               sum(queued_chip_s + partial_chip_s + all_allocated_chip_s) as parts
        from job_window where epoch(window_start) + 3600 <= {AS_OF_S}""",
    )

    def total(expr: str) -> float:
        [sample] = prometheus.query(f"sum({expr})", AS_OF_S)
        return float(sample["value"][1])

    assert _close(total("fleet_goodput_lifetime_chip_seconds_total"), raw["lifetime"])
    assert _close(total('fleet_goodput_demand_chip_seconds_total{category="productive"}'), raw["productive"])
    assert _close(total("fleet_goodput_pending_chip_seconds"), raw["pending"])
    assert _close(
        total("fleet_goodput_demand_chip_seconds_total") + total("fleet_goodput_pending_chip_seconds"), raw["parts"]
    )


def test_the_number_of_series_stays_within_the_stated_bound(store, prometheus):
    [counts] = mpg_sql(
        store["output"],
        """
        select count(distinct (cluster, accelerator, team, queue, workload, size_class)) as job_label_sets,
               (select count(distinct (cluster, accelerator)) from capacity_level) as clusters,
               (select count(*) from interruptions) as interruptions
        from job_attributes""",
    )
    # docs/monitoring.md, "How many series": per job label set 11 categories + 6 sums + submitted + 3 ends;
    # per cluster and accelerator 7 fleet sums + 1 gap; per interruption label set and cause 2.
    bound = counts["job_label_sets"] * 21 + counts["clusters"] * 8 + counts["interruptions"] * 2
    [series] = prometheus.query('count({__name__=~"fleet_goodput_.+"})', AS_OF_S)
    print(f"\nseries of the test fleet: {series['value'][1]} (bound {bound})")
    assert 0 < int(series["value"][1]) <= bound


def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    reason = prometheus_box.ensure_installed()
    if reason:
        pytest.skip(f"NO PROMETHEUS: {reason}")
    checked = prometheus_box.promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = prometheus_box.promtool("test", "rules", str(RULES_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_rules_file_is_the_generator_s_output():
    from fleet_goodput.monitoring.rules import rules_yaml

    assert RULES.read_text() == rules_yaml(), "run: python -m fleet_goodput.monitoring.rules > " + str(RULES)


def _samples(text: str) -> dict[tuple, list]:
    """Each series of an OpenMetrics text (name and labels) → its (timestamp, value) samples, in order."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            series.setdefault(key, []).append((sample.timestamp, sample.value))
    return series


def test_the_history_is_on_the_window_grid_and_counters_never_go_down(store):
    series = _samples(store["history"].read_text())
    grid = [1767225600 + hour * 3600 for hour in range(29)]  # 00:00 to the as-of time, 04:00 the next day
    for (name, labels), samples in series.items():
        assert [float(at) for at, _ in samples] == grid, name
        values = [value for _, value in samples]
        assert values[0] == 0, (name, labels)  # no window ends at the first point
        if name.endswith("_total"):
            assert values == sorted(values), (name, labels)
    job_labels = {"cluster", "accelerator", "team", "queue", "cluster_queue", "workload", "size_class"}
    assert {name for name, labels in series if "job_id" in dict(labels)} == set()
    assert all(set(dict(labels)) <= job_labels | {"category", "status", "cause"} for _, labels in series)


def test_since_continues_the_same_cumulative_values(store, tmp_path):
    assert (
        main(
            [
                "-q",
                "export",
                "openmetrics",
                "--output",
                str(store["output"]),
                "--since",
                "2026-01-01T20:30:00Z",
                "--to",
                str(tmp_path / "late.om"),
            ]
        )
        == 0
    )
    whole, late = _samples(store["history"].read_text()), _samples((tmp_path / "late.om").read_text())
    assert set(late) == set(whole)
    for key, samples in late.items():
        assert float(samples[0][0]) == 1767225600 + 20 * 3600  # from the start of the window holding 20:30
        assert samples == whole[key][20:]


def test_a_scrape_shows_the_counters_now_and_the_last_day_s_factors(store):
    from fleet_goodput.monitoring import openmetrics
    from fleet_goodput.store.delta_store import Store
    from fleet_goodput.store.views import connect

    record = Store(store["output"]).latest()
    with connect(store["output"]) as connection:  # as `mpg serve metrics` reads it
        text = openmetrics.exposition(openmetrics.current(connection, record.as_of_us, record.run_id)).decode()
    scraped, history = _samples(text), _samples(store["history"].read_text())
    for key, samples in history.items():
        assert scraped[key] == [(None, samples[-1][1])], key
    days = mpg_sql(
        store["output"], f"select cluster, accelerator, sg, rg, pg, mpg from fleet_daily where day = '{DAY}'"
    )
    for row in days:
        labels = (("accelerator", row["accelerator"]), ("cluster", row["cluster"]))
        for factor in ("sg", "rg", "pg", "mpg"):
            # DuckDB sums a view's floats in no fixed order, so two reads agree to rounding, not to the bit.
            [(stamp, value)] = scraped[(f"fleet_goodput_last_day_{factor}_ratio", labels)]
            assert stamp is None and _close(value, row[factor]), (factor, labels)
    assert scraped[("fleet_goodput_last_day_timestamp_seconds", ())] == [(None, 1767225600)]
    assert scraped[("fleet_goodput_as_of_timestamp_seconds", ())] == [(None, AS_OF_S)]


def _scraped(box, expr: str) -> list[dict]:
    """The result of `expr` now, once Prometheus has scraped `mpg serve metrics` (it scrapes every second)."""
    deadline = time.monotonic() + 60
    while not (result := box.query(expr)):
        assert time.monotonic() < deadline, f"Prometheus never scraped {expr}"
        time.sleep(0.5)
    return result


def test_prometheus_scrapes_the_latest_run_from_mpg_serve_metrics(store, prometheus):
    [run] = _scraped(prometheus, "fleet_goodput_run_id")
    assert float(run["value"][1]) == 2
    rows = mpg_sql(store["output"], f"select cluster, accelerator, mpg from fleet_daily where day = '{DAY}'")
    found = _by_labels(_scraped(prometheus, "fleet_goodput_last_day_mpg_ratio"), ("cluster", "accelerator"))
    _compare(found, {(row["cluster"], row["accelerator"]): row["mpg"] for row in rows}, "scraped MPG")
    # The scraped counters now are the backfilled history's last point.
    now = float(_scraped(prometheus, "sum(fleet_goodput_lifetime_chip_seconds_total)")[0]["value"][1])
    [then] = prometheus.query("sum(fleet_goodput_lifetime_chip_seconds_total)", AS_OF_S)
    assert _close(now, float(then["value"][1]))


def _page(url: str) -> dict[tuple, list]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
        return _samples(answer.read().decode())


def test_the_served_page_follows_each_committed_run_a_rollback_too(store, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(store["output"], copy)
    with serving(copy) as url:
        before = _page(url)
        assert before[("fleet_goodput_run_id", ())] == [(None, 2)]
        assert main(["-q", "rollback", "--output", str(copy), "--to", "1"]) == 0
        after = _page(url)
    assert after[("fleet_goodput_run_id", ())] == [(None, 3)]
    assert after[("fleet_goodput_as_of_timestamp_seconds", ())] == [(None, CUT_S)]
    # Rolled back to 20:00: the counters go back with it (a reset to Prometheus, docs/monitoring.md).
    lifetime = [key for key in after if key[0] == "fleet_goodput_lifetime_chip_seconds_total"]
    assert sum(after[key][0][1] for key in lifetime) < sum(before[key][0][1] for key in lifetime)


def test_the_dashboards_are_the_generator_s_output():
    from fleet_goodput.monitoring.dashboards import DASHBOARDS, dashboard_json

    assert sorted(path.name for path in GRAFANA.glob("*.json")) == sorted(DASHBOARDS)
    for name in DASHBOARDS:
        assert (GRAFANA / name).read_text(encoding="utf-8") == dashboard_json(name), (
            f"run: python -m fleet_goodput.monitoring.dashboards {GRAFANA}"
        )


@pytest.mark.parametrize("dashboard", sorted(path.name for path in GRAFANA.glob("*.json")))
def test_every_dashboard_panel_s_query_returns_data(dashboard, prometheus):
    _scraped(prometheus, "fleet_goodput_run_id")  # the stat panels read the served gauges
    board = json.loads((GRAFANA / dashboard).read_text(encoding="utf-8"))
    assert [variable["name"] for variable in board["templating"]["list"]] == ["DS_PROMETHEUS"]
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"
            if panel["type"] == "stat":  # the last values: the scrape's, now
                result = prometheus.query(target["expr"])
            else:  # over time: the backfilled history
                result = prometheus.query_range(target["expr"], DAY_END_S - 86_400, AS_OF_S, 3600)
            assert result, f"{dashboard}: panel {panel['title']!r}: no data for {target['expr']}"


def test_the_deployed_units_run_a_command_mpg_accepts():
    """deploy/mpg-serve-metrics.service and deploy/kubernetes/metrics.yaml: the command parses as
    `mpg serve metrics`, reads the output the daily routine writes, and the Service and ServiceMonitor
    reach the container's port."""
    import configparser
    import shlex

    from fleet_goodput.cli import build_parser

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((REPOSITORY / "deploy" / "mpg-serve-metrics.service").read_text())
    command = shlex.split(unit["Service"]["ExecStart"])
    assert command[0].endswith("/mpg")
    args = build_parser(command[1:]).parse_args(command[1:])
    assert (args.command, args.kind, args.output) == ("serve", "metrics", "/var/lib/fleet-goodput/output")
    daily = configparser.ConfigParser(strict=False, interpolation=None)
    daily.read_string((REPOSITORY / "deploy" / "mpg-daily.service").read_text())
    assert args.output in daily["Service"]["ReadWritePaths"] and args.output in unit["Service"]["ReadOnlyPaths"]

    manifests = {
        item["kind"]: item
        for item in yaml.safe_load_all((REPOSITORY / "deploy" / "kubernetes" / "metrics.yaml").read_text())
    }
    [container] = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    args = build_parser(container["command"][1:]).parse_args(container["command"][1:])
    assert (args.command, args.kind, args.port) == ("serve", "metrics", container["ports"][0]["containerPort"])
    assert manifests["Service"]["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    assert (
        manifests["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == manifests["Service"]["spec"]["ports"][0]["name"]
    )
    assert manifests["ServiceMonitor"]["spec"]["selector"]["matchLabels"] == manifests["Service"]["metadata"]["labels"]


def test_before_the_first_run_metrics_answers_503_and_export_says_why(tmp_path, capsys):
    import threading
    import urllib.error

    from fleet_goodput.monitoring.serve import server

    httpd = server(tmp_path, "127.0.0.1", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        port = httpd.server_address[1]
        for path, status, words in (("/metrics", 503, "no committed run"), ("/", 404, "/metrics")):
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
            assert answer.value.code == status and words in answer.value.read().decode()
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert main(["export", "openmetrics", "--output", str(tmp_path)]) == 1
    assert main(["export", "openmetrics", "--output", str(tmp_path), "--since", "yesterday"]) == 2
    assert "--since: not an ISO-8601 time: 'yesterday'" in capsys.readouterr().err


def test_the_worked_example_s_counters_are_its_hand_figures(worked_example_run, tmp_path):
    """docs/metric.md section 4, run with its as-of time at 01:00 so that its one window is complete:
    each counter at 01:00 is the example's chip-seconds, worked out by hand (8 chips × seconds)."""
    import worked_example

    telemetry, _ = worked_example_run
    output, history = tmp_path / "out", tmp_path / "history.om"
    assert (
        main(["-q", "run", "--input", str(telemetry), "--output", str(output), "--as_of", "2026-01-01T01:00:00Z"]) == 0
    )
    assert main(["-q", "export", "openmetrics", "--output", str(output), "--to", str(history)]) == 0
    at_one = {
        (name, dict(labels).get("category")): samples[-1][1]
        for (name, labels), samples in _samples(history.read_text()).items()
    }
    chips, seconds = worked_example.CHIPS, worked_example.EXPECTED_SECONDS
    for category in (
        "queued",
        "partial",
        "productive",
        "lost",
        "data_wait",
        "compile",
        "checkpoint_save",
        "checkpoint_restore",
        "init",
        "idle",
    ):
        assert at_one[("fleet_goodput_demand_chip_seconds_total", category)] == chips * seconds[category], category
    assert at_one[("fleet_goodput_demand_chip_seconds_total", "unmeasured")] == 0
    assert at_one[("fleet_goodput_lifetime_chip_seconds_total", None)] == chips * 580
    assert at_one[("fleet_goodput_all_allocated_chip_seconds_total", None)] == chips * 380
    assert math.isclose(at_one[("fleet_goodput_ideal_chip_seconds_total", None)], chips * 100, rel_tol=RELATIVE)
    assert at_one[("fleet_goodput_pending_chip_seconds", None)] == 0
    assert at_one[("fleet_goodput_capacity_chip_seconds_total", None)] == 8 * 3600  # 8 chips online to 01:00
    assert at_one[("fleet_goodput_fleet_all_allocated_chip_seconds_total", None)] == chips * 380
    assert at_one[("fleet_goodput_jobs_submitted_total", None)] == 1
    assert at_one[("fleet_goodput_jobs_ended_total", None)] == 1
    # The preemption at 360 s: 60 s of steps lost, and 120 s until the restore ended at 480 s.
    assert at_one[("fleet_goodput_interruptions_total", None)] == 1
    assert at_one[("fleet_goodput_interruption_cost_chip_seconds_total", None)] == chips * (60 + 120)


def test_the_textfile_holds_what_is_served_and_promtool_finds_nothing_to_lint(store, served, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    assert main(["-q", "export", "textfile", "--output", str(store["output"]), "--to", str(tmp_path / "g.prom")]) == 0
    text = (tmp_path / "g.prom").read_text()
    written = {
        (sample.name, tuple(sorted(sample.labels.items()))): [(None, sample.value)]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    served_page = _page(served)
    assert set(written) == set(served_page)
    for key, [(_, value)] in written.items():
        # The counters are summed in a fixed order, to the bit; the last-day gauges are the views' figures,
        # which DuckDB sums in no fixed order (equal to rounding).
        if key[0].endswith("_total"):
            assert served_page[key] == [(None, value)], key
        else:
            assert _close(served_page[key][0][1], value), key
    reason = prometheus_box.ensure_installed()
    if reason:
        pytest.skip(f"NO PROMETHEUS: {reason}")
    linted = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0 and not linted.stdout.strip(), linted.stdout + linted.stderr
