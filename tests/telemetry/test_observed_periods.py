"""Figures only where the sources looked: each file states what its source observed, and the as-of follows.

A scheduler file's Avro metadata states, per cluster, the period its source
observed (fleet_goodput/telemetry/observed.py). The as-of time is the earliest
cluster's stated end (docs/metric.md, "Time and the as-of time"); capacity
counts only from a cluster's stated start; an event stamped past its file's
stated end is rejected as a clock ahead and changes no figure; new files that
leave weeks unobserved are refused before anything is computed.

The small fleets here are written by hand, and their figures computed by hand
in the comments: two clusters, `busy` (8 h100) and `quiet` (4 tpu-v5e).
"""

from __future__ import annotations

import contextlib
import io
import itertools
from pathlib import Path

import fastavro
import pytest

from fleet_goodput import exits
from fleet_goodput.cli import main
from fleet_goodput.core.asof import SuspiciousAsOf, clock_time, kept_times, observed_entries, observed_periods
from fleet_goodput.core.config import load_settings
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry import observed
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.telemetry.decode import decode_file
from importing import import_to, run_and_read

HOUR_US = 3600 * 1_000_000
DAY_US = 24 * HOUR_US
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00Z
SETTINGS = load_settings()
ACCELERATORS = SETTINGS.accelerators


def _scheduler(event_id, time_us, kind, cluster, accelerator, chips, job_id=None):
    return {
        "event_id": event_id,
        "event_time": time_us,
        "job_id": job_id,
        "type": kind,
        "cluster": cluster,
        "accelerator": accelerator,
        "chips": chips,
        "workload": "TRAINING" if kind == "SUBMIT" else None,
        "framework": None,
        "team": None,
        "topology": None,
        "priority": None,
    }


def _job(job_id, cluster, accelerator, chips, submit_us, start_us, end_us=None):
    records = [
        _scheduler(f"{job_id}-s", submit_us, "SUBMIT", cluster, accelerator, chips, job_id),
        _scheduler(f"{job_id}-a", start_us, "ALLOCATE", cluster, accelerator, chips, job_id),
    ]
    if end_us is not None:
        records.append(_scheduler(f"{job_id}-f", end_us, "FINISH", cluster, accelerator, 0, job_id))
    return records


def _fleet(folder: Path, *extra: dict, periods=None) -> Path:
    """`busy`: 8 h100 online since 2025-12-20 (a level from before anyone looked), job A holds all 8 from
    01:00 to 03:00; `quiet`: 4 tpu-v5e, no job. Observed: busy 00:00 .. 06:00, quiet 00:00 .. 04:00."""
    records = [
        _scheduler("cap-busy", T0 - 12 * DAY_US, "CAPACITY", "busy", "h100", 8),
        _scheduler("cap-quiet", T0, "CAPACITY", "quiet", "tpu-v5e", 4),
        *_job("job-a", "busy", "h100", 8, T0 + HOUR_US, T0 + HOUR_US, T0 + 3 * HOUR_US),
        *extra,
    ]
    periods = periods or {"busy": (T0, T0 + 6 * HOUR_US), "quiet": (T0, T0 + 4 * HOUR_US)}
    write_events(folder / "scheduler" / "part-0.avro", "scheduler", records, observed=periods)
    return folder


def _figures(output: Path) -> dict:
    with connect(output) as connection:
        return {
            name: connection.execute(query).fetchall()
            for name, query in {
                "capacity": "select cluster, sum(capacity_chip_s) from capacity_window group by all order by all",
                "jobs": "select job_id, lifetime_chip_s, all_allocated_chip_s from job_goodput order by all",
                "fleet": "select sum(capacity_chip_s), sum(all_allocated_chip_s) from fleet_daily",
            }.items()
        }


# ---- the statement and the clock ------------------------------------------------------------------
def test_stated_periods_merge_to_each_clusters_earliest_start_and_latest_end_however_grouped():
    parts = [
        observed_entries({"a": (10, 20)}),
        observed_entries({"a": (5, 15), "b": (7, 30)}),
        [(12, "job-x"), (25, "job-y")],
        observed_entries({"b": (9, 40)}),
    ]
    for order in itertools.permutations(parts):
        merged = kept_times(kept_times(*order[:2]), kept_times(*order[2:]))
        assert observed_periods(merged) == {"a": (5, 20), "b": (7, 40)}
        assert clock_time(merged) == 20  # the earliest end: a is complete to 20, b to 40
    # Without a statement the clock is inferred from the events, as before.
    assert clock_time(kept_times([(12, "job-x"), (25, "job-y")])) == 25


@pytest.mark.parametrize(
    "value, why",
    [
        ({"a": [20, 10]}, "impossible period"),
        ({"a": [1.5e15, 1.6e15]}, "integer microseconds"),
        ({"a": [True, 1_767_225_600_000_000]}, "integer microseconds"),
        ({"": [T0, T0]}, "empty cluster name"),
        ({"a\x00": [T0, T0]}, "control characters"),
        ([], "not an object of clusters"),
        ({"a": [T0]}, "from_us, to_us"),
    ],
)
def test_a_malformed_statement_says_what_is_wrong(value, why):
    with pytest.raises(observed.BadStatement, match=why):
        observed.check_periods(value)


def test_a_stated_file_holds_capacity_to_its_start_and_rejects_what_is_past_its_end(tmp_path):
    path = (
        _fleet(
            tmp_path,
            _scheduler("cap-ahead", T0 + 16 * HOUR_US, "CAPACITY", "busy", "h100", 800),
            _scheduler("b-s", T0 + 6 * HOUR_US + 1, "SUBMIT", "busy", "h100", 8, "job-b"),
        )
        / "scheduler"
        / "part-0.avro"
    )
    decoded = decode_file("scheduler", str(path), io.BytesIO(path.read_bytes()), ACCELERATORS)
    times = {event[2]: event[0] for batch in decoded.batches.values() for event in batch}
    assert times["cap-busy"] == T0  # 12 days before anyone looked: held from the start of the observation
    assert "cap-ahead" not in times and "b-s" not in times
    reasons = {row["event_id"]: row["reason"] for row in decoded.rejected}
    assert reasons["cap-ahead"].startswith(
        "dated 10.0 h after the end of cluster busy's period its file states "
        "it observed (2026-01-01T06:00:00Z): a clock ahead"
    )
    assert reasons["b-s"].startswith("dated 1 s after the end of cluster busy's period")
    assert decoded.read == len(times) + len(decoded.rejected)
    assert decoded.observed == {"busy": (T0, T0 + 6 * HOUR_US), "quiet": (T0, T0 + 4 * HOUR_US)}


def test_a_malformed_statement_rejects_the_files_events_with_the_reason(tmp_path):
    path = tmp_path / "bad.avro"
    with open(path, "wb") as out:
        fastavro.writer(
            out,
            fastavro.parse_schema(_schema()),
            [_scheduler("c", T0, "CAPACITY", "a", "h100", 8)],
            metadata={observed.META_KEY: '{"a": [5, 1]}'},
        )
    decoded = decode_file("scheduler", str(path), io.BytesIO(path.read_bytes()), ACCELERATORS)
    assert not decoded.batches and decoded.read == 1
    assert "statement of what it observed is malformed" in decoded.rejected[0]["reason"]


def _schema():
    from fleet_goodput import schemas

    return schemas.schema_json("scheduler")


# ---- through the pipeline -------------------------------------------------------------------------
@pytest.mark.slow
def test_two_clusters_one_quiet_the_as_of_is_the_earliest_stated_end(tmp_path):
    """The docs' worked example (docs/metric.md): busy is observed to 06:00, quiet to 04:00, so the
    fleet is complete to 04:00. Capacity: busy 8 chips from 00:00 (not from its level 12 days before)
    to 04:00 = 32 chip-h; quiet 4 x 4 h = 16 chip-h. Job A holds 8 chips 01:00-03:00 = 16 chip-h.
    Fleet SG = 16 / 48."""
    outcome = run_batch(str(_fleet(tmp_path / "in")), str(tmp_path / "out"), SETTINGS)
    manifest = outcome.manifest
    assert manifest["as_of_us"] == T0 + 4 * HOUR_US and manifest["clock"]["basis"] == "stated"
    assert manifest["clock"]["observed"]["busy"]["to"] == "2026-01-01T06:00:00Z"
    figures = _figures(tmp_path / "out")
    assert figures["capacity"] == [("busy", 8 * 4 * 3600.0), ("quiet", 4 * 4 * 3600.0)]
    assert figures["jobs"] == [("job-a", 8 * 2 * 3600.0, 8 * 2 * 3600.0)]
    assert figures["fleet"] == [(48 * 3600.0, 16 * 3600.0)]


@pytest.mark.slow
def test_events_past_their_files_stated_end_change_no_figure_and_are_counted(tmp_path):
    """A capacity level restated with a clock 10 h ahead (local time written as UTC) and a SUBMIT 11
    months ahead: rejected with their reason, every figure and the as-of as without them."""
    clean = run_batch(str(_fleet(tmp_path / "clean")), str(tmp_path / "clean-out"), SETTINGS)
    ahead = _fleet(
        tmp_path / "ahead",
        _scheduler("cap-ahead", T0 + 16 * HOUR_US, "CAPACITY", "busy", "h100", 8),
        *_job("job-far", "busy", "h100", 8, T0 + 334 * DAY_US, T0 + 334 * DAY_US),
    )
    outcome = run_batch(str(ahead), str(tmp_path / "ahead-out"), SETTINGS)
    assert outcome.manifest["as_of_us"] == clean.manifest["as_of_us"] == T0 + 4 * HOUR_US
    assert _figures(tmp_path / "ahead-out") == _figures(tmp_path / "clean-out")
    counts = outcome.manifest["streams"]["scheduler"]
    assert counts["rejected"] == 3 and counts["waiting"] == 0 and outcome.manifest["reconciles"]
    with connect(tmp_path / "ahead-out") as connection:
        reasons = connection.execute("select event_id, reason from rejected order by all").fetchall()
    assert [event for event, _ in reasons] == ["cap-ahead", "job-far-a", "job-far-s"]
    assert all("after the end of cluster busy's period its file states it observed" in why for _, why in reasons)


@pytest.mark.slow
def test_a_wrong_folder_is_refused_before_anything_is_computed(tmp_path, capsys):
    """A store observed to 2026-01-01T06:00; then a folder whose files state the cluster observed only
    from eleven months later: refused with the gap, nothing committed; confirmed, it runs."""
    store = tmp_path / "out"
    assert main(["-q", "run", "--input", str(_fleet(tmp_path / "day")), "--output", str(store)]) == 0
    later = T0 + 334 * DAY_US
    wrong = tmp_path / "wrong"
    write_events(
        wrong / "scheduler" / "part-0.avro",
        "scheduler",
        [
            _scheduler("cap-late", later, "CAPACITY", "busy", "h100", 8),
            *_job("job-late", "busy", "h100", 8, later, later),
        ],
        observed={"busy": (later, later + HOUR_US), "quiet": (later, later + HOUR_US)},
    )
    capsys.readouterr()
    assert main(["-q", "run", "--input", str(wrong), "--output", str(store)]) == exits.USAGE
    refused = capsys.readouterr().err
    assert (
        "the new files state cluster 'busy' observed from 2026-12-01T00:00:00Z, 333 days 18 h after the store's "
        "observation of it ended at 2026-01-01T06:00:00Z"
    ) in refused
    assert "Nothing was committed" in refused and "--confirm_as_of" in refused
    assert len(Store(store).runs()) == 1
    with pytest.raises(SuspiciousAsOf):  # the notebook API refuses it the same way
        run_batch(str(wrong), str(store), SETTINGS, build_views=False)
    assert main(["-q", "run", "--input", str(wrong), "--output", str(store), "--confirm_as_of"]) == 0
    assert Store(store).latest().as_of_us == later + HOUR_US


# ---- the daily routine on a fleet with quiet hours across midnight --------------------------------
def _quiet_days(root: Path) -> list[Path]:
    """Three daily deliveries of a collector that states each cluster observed from the first day's
    midnight to the next midnight: day 1 has job A (01:00-03:00), day 2 nothing at all, day 3 job B
    (09:00-10:00). No stray event of another job keeps the clock moving."""
    days = [
        [
            _scheduler("cap", T0, "CAPACITY", "busy", "h100", 8),
            *_job("job-a", "busy", "h100", 8, T0 + HOUR_US, T0 + HOUR_US, T0 + 3 * HOUR_US),
        ],
        [],
        _job(
            "job-b",
            "busy",
            "h100",
            8,
            T0 + 2 * DAY_US + 9 * HOUR_US,
            T0 + 2 * DAY_US + 9 * HOUR_US,
            T0 + 2 * DAY_US + 10 * HOUR_US,
        ),
    ]
    folders = []
    for number, records in enumerate(days):
        folder = root / f"day-{number + 1}"
        write_events(
            folder / "scheduler" / "poll.avro",
            "scheduler",
            records,
            observed={"busy": (T0, T0 + (number + 1) * DAY_US)},
        )
        folders.append(folder)
    return folders


@pytest.mark.slow
def test_quiet_hours_across_midnight_complete_every_day_and_the_gate_says_why_when_not(tmp_path, capsys):
    store = tmp_path / "store"
    for number, folder in enumerate(_quiet_days(tmp_path)):
        assert main(["-q", "run", "--input", str(folder), "--output", str(store)]) == 0
        day = f"2026-01-0{number + 1}"
        assert main(["-q", "report", "--output", str(store), "--date", day, "--require-complete"]) == 0, day
    page = (store / "reports" / "2026-01-02" / "index.html").read_text()
    assert "<b>busy</b> 2026-01-01T00:00:00Z .. 2026-01-03T00:00:00Z" in page  # as the day-2 run stood
    # Day 2: 8 chips online for 24 h, none held: SG 0, the day complete though nothing happened.
    with connect(store) as connection:
        days = connection.execute("select day::varchar, capacity_chip_s, sg from fleet_daily order by day").fetchall()
    assert days == [
        ("2026-01-01", 8 * 86_400.0, 2 / 24),
        ("2026-01-02", 8 * 86_400.0, 0.0),
        ("2026-01-03", 8 * 86_400.0, 1 / 24),
    ]
    capsys.readouterr()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", "--output", str(store), "--date", "2026-01-04", "--require-complete"]) == exits.FAILED
    said = capsys.readouterr().err
    assert "The data reaches 2026-01-04T00:00:00Z" in said
    assert "busy: observed 2026-01-01T00:00:00Z .. 2026-01-04T00:00:00Z" in said


# ---- a finished log imported alone ----------------------------------------------------------------
TWO_HOUR_MEGATRON = (
    "using world size: 8, data-parallel size: 8, context-parallel size: 1, hierarchical context-parallel sizes: "
    "None, tensor-model-parallel size: 1, pipeline-model-parallel size: 1\n"
    "[after megatron is initialized] datetime: 2026-02-01 10:00:00.000000 \n"
    " [2026-02-01 10:00:20.500000] iteration        5/    2000 | consumed samples:           40 | elapsed time "
    "per iteration (ms): 4000.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 9.1E+00 |"
    " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    " [2026-02-01 12:00:20.500000] iteration     1805/    2000 | consumed samples:        14440 | elapsed time "
    "per iteration (ms): 4000.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 3.1E+00 |"
    " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
)


@pytest.mark.slow
def test_a_finished_log_imported_alone_gets_its_figures_from_a_plain_run(tmp_path):
    """The log stops two hours after its start without its end line: the job FAILs at its last time,
    two hours after its ALLOCATE with no scheduler event between. The import states the log's period,
    so the FAIL is not taken for a clock ahead: nothing waits, and the job's 2 h x 8 chips count."""
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "run.log").write_text(TWO_HOUR_MEGATRON, encoding="utf-8")
    imported, _ = import_to("logs", folder, tmp_path / "in", profile="megatron", job="j", accelerator="h100", chips=8)
    ends = sorted(r["event_time"] for r in imported.streams["scheduler"])
    assert ends[-1] - ends[-2] > HOUR_US  # what the inference from event times once set aside
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert all(counts["waiting"] == 0 for counts in manifest["streams"].values())
    assert manifest["clock"]["basis"] == "stated" and manifest["as_of_us"] == ends[-1]
    assert jobs["j"]["status"] == "FAILED"
    assert jobs["j"]["lifetime_chip_s"] == pytest.approx(8 * (ends[-1] - ends[0]) / 1e6)


# ---- a Kubernetes watch: capacity from the watch's start, not from a node's Ready transition ---------
def _node_event(change: str, heartbeat: str, kind_of_file: str = "watch") -> dict:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "uid": "uid-n1",
            "resourceVersion": heartbeat[11:13],
            "labels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
            "creationTimestamp": "2025-12-20T00:00:00Z",
        },
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": "2025-12-20T00:01:00Z",
                }
            ],
        },
    }
    return {"type": change, "object": node} if kind_of_file == "watch" else node


# A Job of one H100 GPU: created 01:00, running from 01:00, complete at 02:00.
_JOB_SNAPSHOTS = (
    ("ADDED", "7", {}),
    ("MODIFIED", "8", {"startTime": "2026-01-01T01:00:00Z", "ready": 1, "active": 1}),
    (
        "MODIFIED",
        "9",
        {
            "startTime": "2026-01-01T01:00:00Z",
            "succeeded": 1,
            "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T02:00:00Z"}],
        },
    ),
)


def _job_object(version: str, status: dict) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "probe",
            "namespace": "ml",
            "uid": "u-probe",
            "resourceVersion": version,
            "creationTimestamp": "2026-01-01T01:00:00Z",
        },
        "spec": {
            "parallelism": 1,
            "template": {
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                }
            },
        },
        "status": status,
    }


@pytest.mark.slow
def test_a_watch_counts_capacity_from_its_start_and_a_relist_appended_changes_nothing(tmp_path):
    """A node Ready since 2025-12-20 (12 days before), watched from its heartbeat at 00:00 to the one
    at 06:00: 8 chips x 6 h = 48 chip-h of capacity, as of 06:00, where its lastTransitionTime alone
    would give 12 days of it. A re-list at 06:00 appended to the import states nothing further."""
    import json

    watch = tmp_path / "watch" / "nodes.jsonl"
    watch.parent.mkdir()
    watch.write_text(
        "".join(
            json.dumps(_node_event(change, heartbeat)) + "\n"
            for change, heartbeat in (("ADDED", "2026-01-01T00:00:00Z"), ("MODIFIED", "2026-01-01T06:00:00Z"))
        )
        + "".join(
            json.dumps({"type": change, "object": _job_object(version, status)}) + "\n"
            for change, version, status in _JOB_SNAPSHOTS
        )
    )
    command = ["-q", "import", "kubernetes", "--cluster", "gke-1", "--out", str(tmp_path / "in"), "--append"]
    assert main([*command[:3], str(watch), *command[3:]]) == 0
    outcome = run_batch(str(tmp_path / "in"), str(tmp_path / "out"), SETTINGS)
    assert outcome.manifest["as_of_us"] == T0 + 6 * HOUR_US
    assert outcome.manifest["clock"]["observed"]["gke-1"]["from_us"] == T0
    assert _figures(tmp_path / "out")["capacity"] == [("gke-1", 8 * 6 * 3600.0)]
    assert _figures(tmp_path / "out")["jobs"] == [("ml/probe", 3600.0, 3600.0)]

    relist = tmp_path / "relist" / "nodes.json"
    relist.parent.mkdir()
    relist.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [_node_event("ADDED", "2026-01-01T06:00:00Z", "list"), _job_object(*_JOB_SNAPSHOTS[-1][1:])],
            }
        )
    )
    before = sorted(path.name for path in (tmp_path / "in" / "scheduler").iterdir())
    assert main([*command[:3], str(relist), *command[3:]]) == 0
    assert sorted(path.name for path in (tmp_path / "in" / "scheduler").iterdir()) == before


def test_of_the_levels_before_a_stated_start_the_latest_holds_there(tmp_path):
    """Levels of 8 (12 days before) and 6 chips (a day before) before the stated start: 6 holds from the
    start, and the earlier level is set aside as superseded, counted, with its reason."""
    path = tmp_path / "scheduler" / "part-0.avro"
    write_events(
        path,
        "scheduler",
        [
            _scheduler("early", T0 - 12 * DAY_US, "CAPACITY", "busy", "h100", 8),
            _scheduler("later", T0 - DAY_US, "CAPACITY", "busy", "h100", 6),
        ],
        observed={"busy": (T0, T0 + HOUR_US)},
    )
    decoded = decode_file("scheduler", str(path), io.BytesIO(path.read_bytes()), ACCELERATORS)
    (batch,) = decoded.batches.values()
    assert [(event[2], event[0], event[4][0]) for event in batch] == [("later", T0, 6)]
    (row,) = decoded.rejected
    assert row["event_id"] == "early" and row["reason"].startswith("a capacity level superseded before the period")
