"""Grafana dashboards of fleet-goodput's metrics, as the JSON files of deploy/grafana/.

`python -m fleet_goodput.monitoring.dashboards deploy/grafana` writes them (a test keeps the
files the same). Every panel reads Prometheus through the data-source variable `DS_PROMETHEUS`
(`${DS_PROMETHEUS}`), so one file serves any Prometheus, imported or provisioned. The factor
panels write the recording rules' expressions out (fleet_goodput/monitoring/rules.py) rather
than read the recorded series: they then show backfilled history too, which rules never
evaluated (docs/monitoring.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fleet_goodput.monitoring.openmetrics import PREFIX
from fleet_goodput.monitoring.rules import CAPACITY, DEMAND, Base, factor_expr

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
RATIO = {"unit": "percentunit", "min": 0, "max": 1}


def _target(expr: str, legend: str, ref: int) -> dict:
    return {"refId": chr(ord("A") + ref), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}


def _panel(
    title: str,
    targets: list[tuple[str, str]],
    *,
    kind: str = "timeseries",
    unit: dict | None = None,
    description: str = "",
) -> dict:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": unit or {}, "overrides": []},
        "targets": [_target(expr, legend, ref) for ref, (expr, legend) in enumerate(targets)],
    }


def _factors(labels: tuple[str, ...], base: Base, window: str, legend: str = "") -> list[tuple[str, str]]:
    return [
        (factor_expr(factor, labels, base, window), f"{legend}{factor.upper()}") for factor in ("mpg", "sg", "rg", "pg")
    ]


def _per(factor: str, label: str, base: Base) -> dict:
    labels = ("cluster", "accelerator") if label == "cluster" else (label,)
    legend = "{{cluster}} {{accelerator}}" if label == "cluster" else f"{{{{{label}}}}}"
    return _panel(
        f"{factor.upper()} per {label} (per day)",
        [(factor_expr(factor, labels, base, "1d"), legend)],
        unit=RATIO,
        description=f"{factor.upper()} over the day ending at each point, per {label}: a ratio "
        "of the counters' increases (docs/monitoring.md)",
    )


def _share_of_demand(counter: str, by: str) -> str:
    return (
        f"sum by ({by}) (increase({counter}[1d]))\n  / ignoring ({by}) group_left ()"
        f" sum (increase({PREFIX}lifetime_chip_seconds_total[1d]))"
    )


def overview() -> dict:
    last_day = [(f"{PREFIX}last_day_fleet_{factor}_ratio", factor.upper()) for factor in ("mpg", "sg", "rg", "pg")]
    return _dashboard(
        "fleet-goodput-overview",
        "Fleet goodput: MPG and its factors",
        [
            _panel(
                "Fleet MPG, SG, RG and PG of the last complete day",
                last_day,
                kind="stat",
                unit=RATIO,
                description="The gauges of the latest run served by `mpg serve metrics` (fleet_daily's sums)",
            ),
            _panel(
                "Fleet MPG and factors (per day)",
                _factors((), CAPACITY, "1d"),
                unit=RATIO,
                description="Over the day ending at each point, capacity base",
            ),
            _panel(
                "Fleet MPG and factors (per hour)",
                _factors((), CAPACITY, "1h"),
                unit=RATIO,
                description="Over the hour ending at each point, capacity base",
            ),
            _panel(
                "Badput by category (share of the jobs' demand, per day)",
                [
                    (
                        _share_of_demand(f'{PREFIX}demand_chip_seconds_total{{category!="productive"}}', "category"),
                        "{{category}}",
                    )
                ],
                unit=RATIO,
                description="Chip-time of each category over the jobs' lifetime chip-time (badput_daily, demand base)",
            ),
            _panel(
                "Idle capacity (share of capacity, per day)",
                [
                    (
                        f"1 - sum by (cluster) (increase({PREFIX}fleet_held_chip_seconds_total[1d]))\n"
                        f"  / sum by (cluster) (increase({PREFIX}capacity_chip_seconds_total[1d]))",
                        "{{cluster}}",
                    )
                ],
                unit=RATIO,
                description="Chips online that no job held",
            ),
            _panel(
                "Chip-hours of capacity and demand (per day)",
                [
                    (f"sum (increase({PREFIX}capacity_chip_seconds_total[1d])) / 3600", "capacity"),
                    (f"sum (increase({PREFIX}lifetime_chip_seconds_total[1d])) / 3600", "demand"),
                    (
                        f'sum (increase({PREFIX}demand_chip_seconds_total{{category="productive"}}[1d])) / 3600',
                        "productive",
                    ),
                ],
                unit={"unit": "short"},
            ),
        ],
    )


def segments() -> dict:
    return _dashboard(
        "fleet-goodput-segments",
        "Fleet goodput per cluster, team and queue",
        [
            _per("mpg", "cluster", CAPACITY),
            _per("sg", "cluster", CAPACITY),
            _per("mpg", "team", DEMAND),
            _per("rg", "team", DEMAND),
            _per("mpg", "queue", DEMAND),
            _per("sg", "queue", DEMAND),
            _per("mpg", "cluster_queue", DEMAND),
            _per("mpg", "workload", DEMAND),
            _panel(
                "MPG per team, last complete day",
                [(f'{PREFIX}last_day_segment_mpg_ratio{{dimension="team"}}', "{{segment}}")],
                kind="stat",
                unit=RATIO,
            ),
        ],
    )


def interruptions() -> dict:
    return _dashboard(
        "fleet-goodput-interruptions",
        "Fleet goodput: interruptions by cause",
        [
            _panel(
                "Interruptions by cause (per day)",
                [(f"sum by (cause) (increase({PREFIX}interruptions_total[1d]))", "{{cause}}")],
                unit={"unit": "short"},
            ),
            _panel(
                "Chip-hours interruptions cost, by cause (per day)",
                [(f"sum by (cause) (increase({PREFIX}interruption_cost_chip_seconds_total[1d])) / 3600", "{{cause}}")],
                unit={"unit": "short"},
                description="Work lost and recovery (the interruptions view's cost)",
            ),
            _panel(
                "Interruptions by cluster and cause (per day)",
                [(f"sum by (cluster, cause) (increase({PREFIX}interruptions_total[1d]))", "{{cluster}} {{cause}}")],
                unit={"unit": "short"},
            ),
            _panel(
                "Jobs submitted and ended (per day)",
                [
                    (f"sum (increase({PREFIX}jobs_submitted_total[1d]))", "submitted"),
                    (f"sum by (status) (increase({PREFIX}jobs_ended_total[1d]))", "{{status}}"),
                ],
                unit={"unit": "short"},
            ),
        ],
    )


def _dashboard(uid: str, title: str, panels: list[dict]) -> dict:
    for number, panel in enumerate(panels):
        panel["id"] = number + 1
        panel["gridPos"] = {"h": 8, "w": 12, "x": 12 * (number % 2), "y": 8 * (number // 2)}
    return {
        "uid": uid,
        "title": title,
        "tags": ["fleet-goodput"],
        "timezone": "utc",
        "editable": True,
        "schemaVersion": 37,
        "version": 1,
        "time": {"from": "now-7d", "to": "now"},
        "refresh": "5m",
        "description": "fleet-goodput's figures (docs/monitoring.md); the data source is the variable DS_PROMETHEUS",
        "templating": {
            "list": [
                {
                    "name": "DS_PROMETHEUS",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


DASHBOARDS = {
    "fleet-goodput-overview.json": overview,
    "fleet-goodput-segments.json": segments,
    "fleet-goodput-interruptions.json": interruptions,
}


def dashboard_json(name: str) -> str:
    return json.dumps(DASHBOARDS[name](), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/grafana")
    folder.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (folder / name).write_text(dashboard_json(name), encoding="utf-8")
