"""`kubernetes` importer on hand-built watch streams of one cluster (tests/data/kubernetes/README.md).

Every expected figure below is read off the fixture's objects by hand (the
times are minutes after 2026-03-02T00:00:00Z), not computed by the importer
or the pipeline.
"""

from __future__ import annotations

import csv
import json
import random
from datetime import date
from pathlib import Path

import pytest
import yaml

from fleet_goodput.cli import main
from fleet_goodput.importers import kubernetes
from fleet_goodput.importers.import_folder import write_import
from fleet_goodput.quality.period import Period
from fleet_goodput.store.views import connect
from importing import FIXTURES, by_job, options, run_and_read, tree_bytes

ROOT = Path(__file__).parents[2]
K8S = FIXTURES / "kubernetes"
FILES = sorted(p for p in K8S.iterdir() if p.name != "README.md")
T0 = 1_772_409_600_000_000  # 2026-03-02T00:00:00Z
MINUTE = 60_000_000
W1, W2, W3, W4 = (
    "team-a/jobset-train-1-3f9a2",
    "team-b/job-sweep-8c1d0",
    "team-c/job-serve-eval-51e7b",
    "team-a/job-scratch-0a9e4",
)
JOBSET, JOB = "team-d/pretrain", "team-d/eval"


def at(minutes: float) -> int:
    return T0 + int(minutes * MINUTE)


def read(files=FILES, **overrides):
    return kubernetes.read(list(files), options(cluster="gke-1", **overrides))


def timeline(imported, job_id):
    return [(r["type"], r["event_time"], r["chips"]) for r in by_job(imported, "scheduler", job_id)]


@pytest.fixture(scope="module")
def imported():
    return read()


def test_workload_evicted_twice_and_readmitted(imported):
    """W1: admitted at 10, evicted at 60 (a cohort reclaim by W3), re-admitted at 90, evicted at 120
    (PodsReady timeout), re-admitted at 140, finished at 300; 2 pods x 4 GPUs. The re-admission at 90
    reaches the watch after the eviction at 120, and the second file re-lists it."""
    assert timeline(imported, W1) == [
        ("SUBMIT", at(0), 8),
        ("ALLOCATE", at(10), 8),
        ("PREEMPT", at(60), 0),
        ("ALLOCATE", at(90), 8),
        ("PREEMPT", at(120), 0),
        ("ALLOCATE", at(140), 8),
        ("FINISH", at(300), 0),
    ]
    records = by_job(imported, "scheduler", W1)
    assert [r["reason"] for r in records if r["type"] == "PREEMPT"] == [
        "Preempted (InCohortReclamation)",
        "PodsReadyTimeout",
    ]
    submit = records[0]
    assert (submit["queue"], submit["team"], submit["priority"], submit["cluster"]) == (
        "cq-research/team-a/lq-train",
        "team-a",
        None,
        "gke-1",
    )


def test_partial_admission_priority_and_a_deleted_pending_workload(imported):
    # W2 (v1beta1): 4 pods x 2 GPUs, admitted with minCount 2 (resourceUsage 4 GPUs), Finished/Failed at 140.
    assert timeline(imported, W2) == [("SUBMIT", at(0), 8), ("ALLOCATE", at(20), 4), ("FAIL", at(140), 0)]
    # W3 (v1beta2, unknown fields, priority 1000): the preemptor, in the other ClusterQueue of the cohort.
    assert timeline(imported, W3) == [("SUBMIT", at(55), 8), ("ALLOCATE", at(60), 8), ("FINISH", at(180), 0)]
    assert by_job(imported, "scheduler", W3)[0]["priority"] == 1000
    assert by_job(imported, "scheduler", W3)[0]["queue"] == "cq-prod/team-c/lq-prod"
    # W4: deleted at 100 while pending, no Finished condition: cancelled at its deletionTimestamp.
    assert timeline(imported, W4) == [("SUBMIT", at(60), 4), ("CANCEL", at(100), 0)]


def test_jobset_restarts_and_a_job_without_kueue(imported):
    """The JobSet: created at 10, every child Job ready at 20 (observed), restarted at 120
    (RestartingJobSet) and ready again at 135 (RestartingJobSet=False, JobsReady: before its observation at
    136), restarted at 245 while its TPU node was NotReady, Failed at 270. The Job: 2 pods x 1 GPU,
    created at 30, both ready when seen at 35, Complete at 95."""
    assert timeline(imported, JOBSET) == [
        ("SUBMIT", at(10), 4),
        ("ALLOCATE", at(20), 4),
        ("PREEMPT", at(120), 0),
        ("ALLOCATE", at(135), 4),
        ("PREEMPT", at(245), 0),
        ("FAIL", at(270), 0),
    ]
    assert by_job(imported, "scheduler", JOBSET)[0]["topology"] == "2x2"
    assert by_job(imported, "scheduler", JOBSET)[0]["accelerator"] == "tpu-v5e"
    assert timeline(imported, JOB) == [("SUBMIT", at(30), 2), ("ALLOCATE", at(35), 2), ("FINISH", at(95), 0)]
    # The JobSet Kueue admits (W1's owner) and the JobSet's child Job are not jobs of their own.
    submitted = {r["job_id"] for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"}
    assert submitted == {W1, W2, W3, W4, JOBSET, JOB}
    assert imported.provenance["skipped"] == {
        "Job of a JobSet": 1,
        "JobSet admitted through a Kueue Workload": 1,
        "Node without accelerators": 1,
    }


def test_capacity_follows_ready_cordoned_and_deleted_nodes(imported):
    """Two 8-GPU nodes and a 4-chip TPU node, Ready at 0. GPU node 1 NotReady (Unknown) 180-240; the
    TPU node NotReady 240-280, cordoned at 330 (its taint's timeAdded), deleted at 360 (no
    deletionTimestamp: the collector's observedTime). Both restated at 360, the input's last observation."""
    levels = [
        (r["accelerator"], r["event_time"], r["chips"])
        for r in imported.streams["scheduler"]
        if r["type"] == "CAPACITY"
    ]
    assert sorted(levels) == [
        ("h100", at(0), 16),
        ("h100", at(180), 8),
        ("h100", at(240), 16),
        ("h100", at(360), 16),
        ("tpu-v5e", at(0), 4),
        ("tpu-v5e", at(240), 0),
        ("tpu-v5e", at(280), 4),
        ("tpu-v5e", at(330), 0),
        ("tpu-v5e", at(360), 0),
    ]


def test_a_line_cut_short_is_rejected_and_the_rest_imported(imported):
    assert [(r.file, r.where, r.reason) for r in imported.rejections] == [
        ("jobs-000.jsonl", "line 5", "not valid JSON (a line cut short by a collector still writing?)")
    ]
    assert imported.caveats == []


def _scheduler(imported) -> list[dict]:
    return sorted(imported.streams["scheduler"], key=lambda r: r["event_id"])


def test_rereading_files_and_reordering_snapshots_add_nothing(tmp_path, imported):
    """The same files twice, and every file's lines shuffled, give the same events."""
    assert _scheduler(read(FILES + FILES)) == _scheduler(imported)
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    for path in FILES:
        values = [value for _, value in kubernetes.json_values(path.read_text()) if value is not None]
        random.Random(path.name).shuffle(values)
        (shuffled / path.name).write_text("".join(json.dumps(v) + "\n" for v in values))
    reordered = read(sorted(shuffled.iterdir()))
    assert _scheduler(reordered) == _scheduler(imported)
    write_import(imported, tmp_path / "a")
    write_import(reordered, tmp_path / "b")
    part = "scheduler/part-00000.avro"
    assert tree_bytes(tmp_path / "a")[part] == tree_bytes(tmp_path / "b")[part]


def test_rolling_files_imported_one_by_one_give_the_same_events(imported):
    """Each rolling Workload file alone (the second starts with the watch's re-list) gives events
    identical, id for id, to those of all the files together: an import per file loses nothing and
    repeats nothing that differs."""
    whole = {r["event_id"]: r for r in imported.streams["scheduler"]}
    parts = [read([K8S / "localqueues.json", K8S / name]) for name in ("workloads-000.jsonl", "workloads-001.jsonl")]
    seen = {}
    for part in parts:
        for record in part.streams["scheduler"]:
            assert whole[record["event_id"]] == record
            seen[record["event_id"]] = record
    assert seen == {i: r for i, r in whole.items() if r["job_id"] in (W1, W2, W3, W4)}


def test_without_the_localqueues_the_cluster_queue_comes_from_the_admission():
    alone = read([K8S / "workloads-001.jsonl"])
    assert {r["job_id"]: r["queue"] for r in alone.streams["scheduler"] if r["type"] == "SUBMIT"} == {
        W1: "cq-research/team-a/lq-train",
        W2: "cq-research/team-b/lq-batch",
        W3: "cq-prod/team-c/lq-prod",
    }


def test_a_workload_never_admitted_waits_in_the_cluster_queue_its_local_queues_neighbours_were_admitted_to():
    """Without the LocalQueue objects, W4 (team-a/lq-train, never admitted) takes the ClusterQueue that W1,
    of the same LocalQueue, was admitted to; it no longer drops out of its queue's row as UNKNOWN."""
    alone = read([K8S / "workloads-000.jsonl", K8S / "workloads-001.jsonl"])
    queues = {r["job_id"]: r["queue"] for r in alone.streams["scheduler"] if r["type"] == "SUBMIT"}
    assert queues[W4] == queues[W1] == "cq-research/team-a/lq-train"


def test_every_kubernetes_end_and_eviction_says_why(imported):
    """end_reason for Kubernetes jobs: the terminal condition's reason and message, as the objects say."""
    ends = {
        (r["job_id"], r["type"]): r["reason"]
        for r in imported.streams["scheduler"]
        if r["type"] in ("FINISH", "FAIL", "CANCEL")
    }
    assert ends == {
        (W1, "FINISH"): "Succeeded: jobset completed successfully",
        (W2, "FAIL"): "Failed: Job failed: BackoffLimitExceeded",
        (W3, "FINISH"): "Succeeded: Job finished successfully",
        (W4, "CANCEL"): "Deleted (before it finished)",
        (JOBSET, "FAIL"): "ReachedMaxRestarts: jobset failed due to reaching max number of restarts",
        (JOB, "FINISH"): "CompletionsReached: Reached expected number of succeeded pods",
    }


def test_kueue_preemptions_keep_their_kind_apart_as_causes():
    """Kueue's Preempted condition names why (kueue's constants): InClusterQueue and InCohortReclamation are
    two causes, not one; an exit code is a detail of one cause, not a cause of its own."""
    from fleet_goodput.core.interruptions import cause_of

    assert cause_of("PREEMPT", "Preempted (InClusterQueue)") == "PREEMPTED (InClusterQueue)"
    assert cause_of("PREEMPT", "Preempted (InCohortReclamation)") == "PREEMPTED (InCohortReclamation)"
    assert cause_of("PREEMPT", "PodsReadyTimeout") == "PODSREADYTIMEOUT"
    assert cause_of("FAIL", "FAILED (exit 1:0)") == cause_of("FAIL", "FAILED (exit 2:0)") == "FAILED"
    assert cause_of("FAIL", "NODE_FAIL: xid 79") == "NODE_FAIL"


def _line(change, obj, observed=None):
    event = {"type": change, "object": obj}
    if observed:
        event["observedTime"] = observed
    return json.dumps(event) + "\n"


def _node(name, labels, allocatable):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "5",
            "labels": labels,
            "creationTimestamp": "2026-03-02T00:00:00Z",
        },
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-03-02T00:05:00Z",
                    "lastTransitionTime": "2026-03-02T00:01:00Z",
                }
            ],
        },
    }


def test_the_accelerator_label_map_can_be_extended(tmp_path):
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-NEXT"}
    stream = tmp_path / "nodes.jsonl"
    stream.write_text(_line("ADDED", _node("n1", labels, {"nvidia.com/gpu": "8"}), "2026-03-02T00:02:00Z"))
    unmapped = read([stream])
    assert [r.reason for r in unmapped.rejections] == ["no node label maps to a catalogue key"]
    extra = tmp_path / "labels.yaml"
    extra.write_text("nvidia.com/gpu.product:\n  NVIDIA-H100-80GB-HBM3-NEXT: h100\n")
    mapped = read([stream], accelerator_labels=str(extra))
    # Ready since 00:01 (its lastTransitionTime), restated at the observation 00:02.
    assert [(r["accelerator"], r["event_time"], r["chips"]) for r in mapped.streams["scheduler"]] == [
        ("h100", at(1), 8),
        ("h100", at(2), 8),
    ]


def test_a_plain_list_without_observed_times_uses_the_objects_times_with_a_caveat(tmp_path):
    """`kubectl get jobs -o json`: the Job's readiness has no time of its own, so the latest time the
    object records (its startTime, 00:07) stands in, with a caveat."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "probe",
            "namespace": "ml",
            "uid": "u-probe",
            "resourceVersion": "9",
            "creationTimestamp": "2026-03-02T00:05:00Z",
        },
        "spec": {
            "parallelism": 1,
            "template": {
                "spec": {
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                }
            },
        },
        "status": {"startTime": "2026-03-02T00:07:00Z", "ready": 1, "active": 1},
    }
    listing = tmp_path / "jobs.json"
    listing.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job]}, indent=2))
    result = read([listing])
    assert timeline(result, "ml/probe") == [("SUBMIT", at(5), 1), ("ALLOCATE", at(7), 1)]
    assert [(c.item, c.caveat) for c in result.caveats] == [
        ("ml/probe", "no observedTime: the latest time the object records is taken")
    ]


def test_what_cannot_be_read_is_rejected_with_its_reason(tmp_path):
    stream = tmp_path / "mixed.jsonl"
    stream.write_text(
        _line("ADDED", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "u1"}})
        + json.dumps(
            {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version: 1 (2)"}}
        )
        + "\n"
        + _line(
            "ADDED",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "cpu", "namespace": "x", "uid": "u2", "creationTimestamp": "2026-03-02T00:00:00Z"},
                "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}},
            },
        )
        + '{"type": "BOOKMARK", "object": {"kind": "Job", "metadata": {"resourceVersion": "12"}}}\n'
        + _line("ADDED", {"apiVersion": "v1", "kind": ["Node"], "metadata": {"name": "n", "uid": "u3"}})
        + _line("ADDED", {"apiVersion": {"v": 1}, "kind": "Node", "metadata": {"name": "n", "uid": "u4"}})
    )
    result = read([stream])
    assert [(r.where, r.reason) for r in result.rejections] == [
        ("line 1", "kind not imported"),
        ("line 2", "watch ERROR event"),
        ("line 5", "kind or apiVersion is not a string"),
        ("line 6", "kind or apiVersion is not a string"),
        ("line 3", "Job asks for no accelerator (nvidia.com/gpu, amd.com/gpu, google.com/tpu)"),
    ]


def test_cli_needs_a_cluster_and_takes_many_files(tmp_path, capsys):
    assert main(["import", "kubernetes", *map(str, FILES), "--out", str(tmp_path / "a")]) == 2
    assert "--cluster NAME" in capsys.readouterr().err
    assert main(["import", "philly", str(K8S), str(K8S), "--out", str(tmp_path / "b")]) == 2
    assert "philly reads one SOURCE, not 2" in capsys.readouterr().err
    assert main(["import", "kubernetes", *map(str, FILES), "--cluster", "gke-1", "--out", str(tmp_path / "c")]) == 0
    assert json.loads((tmp_path / "c" / "SOURCE.json").read_text())["jobs"] == 6


def _chip_minutes(jobs: dict[str, dict]) -> dict[str, tuple]:
    """(lifetime, all-allocated, partial) chip-minutes per job of job_goodput rows."""
    return {
        job_id: tuple(round(row[f"{figure}_chip_s"] / 60, 9) for figure in ("lifetime", "all_allocated", "partial"))
        for job_id, row in jobs.items()
    }


@pytest.mark.slow
def test_goodput_per_queue_and_cluster_queue_through_the_pipeline(tmp_path, imported):
    """Chip-minutes by hand from the timelines above (no runtime stream: SG only; RG, PG, MPG unknown).

    W1 lifetime 300 x 8, all-allocated 50 + 30 + 160 = 240 x 8; W4 40 x 4, never allocated;
    W2 140 x 8, partial 120 x 8; W3 125 x 8, all-allocated 120 x 8; the JobSet 260 x 4,
    all-allocated 100+110 = 210 x 4; the Job 65 x 2, all-allocated 60 x 2."""
    write_import(imported, tmp_path / "in")
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert manifest["reconciles"] and manifest["streams"]["scheduler"]["rejected"] == 0
    minutes = _chip_minutes(jobs)
    assert minutes == (
        {
            W1: (2400, 1920, 0),
            W4: (160, 0, 0),
            W2: (1120, 0, 960),
            W3: (1000, 960, 0),
            JOBSET: (1040, 840, 0),
            JOB: (130, 120, 0),
        }
    )
    with connect(tmp_path / "out") as connection:
        by_queue = dict(connection.execute("select queue, sg from goodput_by_queue").fetchall())
        by_cluster_queue = {
            row[0]: row[1:]
            for row in connection.execute(
                "select cluster_queue, jobs, sg, rg, pg, mpg, lifetime_chip_s / 60 from goodput_by_cluster_queue"
            ).fetchall()
        }
        capacity = dict(
            connection.execute(
                "select accelerator, sum(capacity_chip_s) / 60 from capacity_window group by all"
            ).fetchall()
        )
    assert by_queue == pytest.approx(
        {
            "cq-research/team-a/lq-train": 1920 / 2560,
            "cq-research/team-b/lq-batch": 0.0,
            "cq-prod/team-c/lq-prod": 960 / 1000,
            "UNKNOWN": (840 + 120) / (1040 + 130),
        }
    )
    jobs_in, sg, rg, pg, mpg, lifetime = by_cluster_queue["cq-research"]
    assert (jobs_in, rg, pg, mpg) == (3, None, None, None)  # no runtime stream: unknown, never 0
    assert (sg, lifetime) == pytest.approx((1920 / 3680, 3680))
    assert by_cluster_queue["cq-prod"][1] == pytest.approx(0.96)
    # h100: 16 chips 0-180, 8 to 240, 16 to 360; TPU: 4 chips 0-240 and 280-330. The as-of time is 360.
    assert capacity == pytest.approx({"h100": 16 * 180 + 8 * 60 + 16 * 120, "tpu-v5e": 4 * 240 + 4 * 50})

    # The published report of the day: validated as the daily routine does, with its queue sections.
    # (Imported here: the module imports Great Expectations, 3 s that collecting this file would cost every worker.)
    from fleet_goodput.quality.checked_run import open_checked_run
    from fleet_goodput.report.publish import validate_and_publish

    quality, page = validate_and_publish(open_checked_run(tmp_path / "out"), Period(date(2026, 3, 2), date(2026, 3, 2)))
    assert quality.passed, [c for c in quality.checks if not c.passed]
    by_cluster_queue = {
        row["cluster_queue"]: float(row["sg"])
        for row in csv.DictReader((page.parent / "by_cluster_queue.csv").open(encoding="utf-8"))
    }
    assert by_cluster_queue == pytest.approx({"cq-research": 1920 / 3680, "cq-prod": 0.96, "UNKNOWN": 960 / 1170})
    html = page.read_text()
    assert ">By queue<" in html and ">By cluster queue<" in html and "cq-research/team-b/lq-batch" in html


def _cut(files, until: str, folder):
    """The lines of each file the collector had written by `until` (a list, which has no observedTime, whole)."""
    folder.mkdir()
    for path in files:
        values = [
            value
            for _, value in kubernetes.json_values(path.read_text())
            if value is not None and value.get("observedTime", until) <= until
        ]
        (folder / path.name).write_text("".join(json.dumps(v) + "\n" for v in values))
    return sorted(folder.iterdir())


@pytest.mark.slow
def test_rolling_imports_appended_between_runs_give_the_figures_of_one_run(tmp_path, capsys):
    """The collector's files as they stood at 02:00:30, imported and run; then every file, appended
    (the re-listed Workloads, the lines already imported) and run again: the second run reads only the
    new events, none of them repeated or late, and the figures are the hand-computed ones of the
    whole stream. A third import of the same files adds nothing."""
    telemetry, store = tmp_path / "telemetry", tmp_path / "goodput"
    early = _cut(FILES, "2026-03-02T02:00:30Z", tmp_path / "early")
    command = ["import", "kubernetes", "--cluster", "gke-1", "--out", str(telemetry), "--append"]
    assert main([*command[:2], *map(str, early), *command[2:]]) == 0
    first, _ = run_and_read(telemetry, store)
    assert main([*command[:2], *map(str, FILES), *command[2:]]) == 0
    second, jobs = run_and_read(telemetry, store)
    # The store's counts over both runs: every event of the whole stream once, and the two capacity
    # levels the first import restated at 02:00:30 (its last observation).
    counts = second["streams"]["scheduler"]
    assert (counts["read"], counts["duplicate"], counts["late"], counts["rejected"]) == (
        len(read().streams["scheduler"]) + 2,
        0,
        0,
        0,
    )
    assert first["streams"]["scheduler"]["read"] < second["streams"]["scheduler"]["read"]
    minutes = _chip_minutes(jobs)
    assert minutes == {
        W1: (2400, 1920, 0),
        W4: (160, 0, 0),
        W2: (1120, 0, 960),
        W3: (1000, 960, 0),
        JOBSET: (1040, 840, 0),
        JOB: (130, 120, 0),
    }
    parts = sorted((telemetry / "scheduler").iterdir())
    capsys.readouterr()
    assert main([*command[:2], *map(str, FILES), *command[2:]]) == 0
    assert "nothing new" in capsys.readouterr().out and sorted((telemetry / "scheduler").iterdir()) == parts


def test_the_collector_may_only_read_the_kinds_the_importer_maps():
    """deploy/kubernetes/collector.yaml: its ClusterRole reads (get, list, watch) exactly the resources
    of the kinds the importer maps, and each is watched by a container."""
    manifests = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "collector.yaml").read_text()))
    role = next(m for m in manifests if m["kind"] == "ClusterRole")
    granted = {
        (group, resource) for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
    }
    assert {verb for rule in role["rules"] for verb in rule["verbs"]} == {"get", "list", "watch"}
    plural = {
        "Workload": "workloads",
        "LocalQueue": "localqueues",
        "ResourceFlavor": "resourceflavors",
        "ClusterQueue": "clusterqueues",
        "Cohort": "cohorts",
        "JobSet": "jobsets",
        "Job": "jobs",
        "Node": "nodes",
    }
    assert granted == {(group, plural[kind]) for kind, group in kubernetes.GROUPS.items()}
    pod = next(m for m in manifests if m["kind"] == "Deployment")["spec"]["template"]["spec"]
    watched = {c["command"][1] for c in pod["containers"] if c["name"].startswith("watch-")}
    assert watched == {
        f"{plural[kind]}.{group}" if group else plural[kind] for kind, group in kubernetes.GROUPS.items()
    }


def test_a_jobset_with_a_cpu_driver_takes_its_workers_accelerator(tmp_path):
    """A driver replicated job without accelerators (nor a node selector) beside 2 TPU workers of 4
    chips: 8 chips of the workers' accelerator, even with a default --accelerator given."""

    def replicated(name, replicas, template):
        return {"name": name, "replicas": replicas, "template": {"spec": {"parallelism": 1, "template": template}}}

    driver = {"spec": {"containers": [{"name": "driver", "resources": {"requests": {"cpu": "2"}}}]}}
    worker = {
        "spec": {
            "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"},
            "containers": [{"name": "w", "resources": {"limits": {"google.com/tpu": "4"}}}],
        }
    }
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "mixed",
            "namespace": "ml",
            "uid": "u-mixed",
            "resourceVersion": "3",
            "creationTimestamp": "2026-03-02T00:00:00Z",
        },
        "spec": {"replicatedJobs": [replicated("driver", 1, driver), replicated("workers", 2, worker)]},
    }
    stream = tmp_path / "jobsets.jsonl"
    stream.write_text(_line("ADDED", jobset, "2026-03-02T00:00:05Z"))
    submit = read([stream], accelerator="h100").streams["scheduler"][0]
    assert (submit["type"], submit["accelerator"], submit["chips"]) == ("SUBMIT", "tpu-v6e", 8)


def test_a_malformed_object_is_rejected_whole_and_the_rest_imported(tmp_path):
    """W2's snapshots with, in turn, pod sets that are not a list, a priority that is a name, a count no
    event can hold, and a last snapshot whose Finished time is not a time: each time W2 is rejected with
    nothing of it kept (not even its SUBMIT), and W1 beside it imports as from the fixture."""
    lines = (K8S / "workloads-000.jsonl").read_text().splitlines()
    w2 = [json.loads(line) for line in lines if '"job-sweep-8c1d0"' in line]
    others = [line for line in lines if '"job-sweep-8c1d0"' not in line]

    def spoiled(change):
        copy = json.loads(json.dumps(w2))
        change(copy)
        stream = tmp_path / "workloads.jsonl"
        stream.write_text("\n".join(others + [json.dumps(event) for event in copy]) + "\n")
        return read([K8S / "localqueues.json", stream])

    def finished_at_no_time(events):
        events[-1]["object"]["status"]["conditions"].append(
            {"type": "Finished", "status": "True", "reason": "Failed", "lastTransitionTime": "yesterday"}
        )

    cases = {
        "a field of a type its API does not give it": lambda events: events[-1]["object"]["spec"].update(
            podSets="main"
        ),
        "spec.priority is not a 32-bit integer": lambda events: events[-1]["object"]["spec"].update(priority="high"),
        "podSets[].count is not a whole number of devices up to 2,147,483,647": lambda events: events[-1]["object"][
            "spec"
        ]["podSets"][0].update(count=10**30),
        "Finished.lastTransitionTime is not an RFC 3339 time": finished_at_no_time,
    }
    alone = read([K8S / "localqueues.json", K8S / "workloads-000.jsonl"])
    for reason, change in cases.items():
        result = spoiled(change)
        assert [(r.item, r.reason) for r in result.rejections] == [("Workload team-b/job-sweep-8c1d0", reason)]
        assert not by_job(result, "scheduler", W2)
        assert by_job(result, "scheduler", W1) == by_job(alone, "scheduler", W1)


def _kueue_jobset_streams(folder: Path) -> list[Path]:
    """Workload `team-a/jobset-train-2-77c1e` (2 pods x 4 H100, owned by JobSet `train-2`): created at 0,
    admitted at 10 with 8 GPUs, Finished (Succeeded) at 100. Its JobSet restarts at 40 (a child Job failed)
    and every child Job is ready again at 52 (RestartingJobSet=False, JobsReady), seen at 53."""
    stamp = "2026-03-02T00:{:02d}:00Z".format
    template = {
        "spec": {
            "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        }
    }
    meta = {
        "name": "jobset-train-2-77c1e",
        "namespace": "team-a",
        "uid": "wl-train-2",
        "creationTimestamp": stamp(0),
        "ownerReferences": [
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "name": "train-2",
                "uid": "js-train-2",
                "controller": True,
            }
        ],
    }
    spec = {"queueName": "lq-train", "podSets": [{"name": "workers", "count": 2, "template": template}]}
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": stamp(10)}
    admission = {
        "clusterQueue": "cq-research",
        "podSetAssignments": [
            {
                "name": "workers",
                "count": 2,
                "flavors": {"nvidia.com/gpu": "h100"},
                "resourceUsage": {"nvidia.com/gpu": "8"},
            }
        ],
    }
    finished = {
        "type": "Finished",
        "status": "True",
        "reason": "Succeeded",
        "message": "jobset completed",
        "lastTransitionTime": "2026-03-02T01:40:00Z",
    }

    def workload(version, conditions, with_admission=True):
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {**meta, "resourceVersion": str(version)},
            "spec": spec,
            "status": {"conditions": conditions, **({"admission": admission} if with_admission else {})},
        }

    def jobset(version, restarts, ready, conditions):
        return {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": "train-2",
                "namespace": "team-a",
                "uid": "js-train-2",
                "creationTimestamp": stamp(0),
                "labels": {"kueue.x-k8s.io/queue-name": "lq-train"},
                "resourceVersion": str(version),
            },
            "spec": {
                "replicatedJobs": [
                    {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 1, "template": template}}}
                ]
            },
            "status": {
                "restarts": restarts,
                "conditions": conditions,
                "replicatedJobsStatus": [{"name": "workers", "ready": ready}],
            },
        }

    restarting = {
        "type": "RestartingJobSet",
        "status": "True",
        "reason": "DefaultFailurePolicy",
        "message": "jobset restarting: job train-2-workers-1 failed",
        "lastTransitionTime": stamp(40),
    }
    settled = {
        "type": "RestartingJobSet",
        "status": "False",
        "reason": "JobsReady",
        "message": "all jobs are ready",
        "lastTransitionTime": stamp(52),
    }
    workloads, jobsets = folder / "workloads.jsonl", folder / "jobsets.jsonl"
    workloads.write_text(
        _line("ADDED", workload(1, [], with_admission=False), stamp(0))
        + _line("MODIFIED", workload(2, [admitted]), stamp(10))
        + _line("MODIFIED", workload(3, [admitted, finished]), "2026-03-02T01:40:00Z")
    )
    jobsets.write_text(
        _line("ADDED", jobset(1, 0, 0, []), stamp(0))
        + _line("MODIFIED", jobset(2, 0, 2, []), stamp(12))
        + _line("MODIFIED", jobset(3, 1, 0, [restarting]), stamp(41))
        + _line("MODIFIED", jobset(4, 1, 2, [settled]), stamp(53))
    )
    return [workloads, jobsets]


def test_a_jobset_restart_under_an_admitted_workload_interrupts_its_job(tmp_path):
    """The JobSet Kueue admits is not a job of its own, but its restart at 40 interrupts the Workload's job:
    PREEMPT at 40 and the 8 admitted GPUs held again at 52. On the job: one interruption, caused by the
    JobSet restart, 30 min of running before it, 12 min to restart, and the 12 min x 8 GPUs lost from its
    allocated time (100 min x 8 - 12 x 8 = 704 GPU-min held)."""
    files = _kueue_jobset_streams(tmp_path)
    imported = read(files)
    job = "team-a/jobset-train-2-77c1e"
    assert timeline(imported, job) == [
        ("SUBMIT", at(0), 8),
        ("ALLOCATE", at(10), 8),
        ("PREEMPT", at(40), 0),
        ("ALLOCATE", at(52), 8),
        ("FINISH", at(100), 0),
    ]
    restart = next(r for r in by_job(imported, "scheduler", job) if r["type"] == "PREEMPT")
    assert restart["reason"] == "JobSetRestart (DefaultFailurePolicy)"
    assert {r["job_id"] for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"} == {job}

    write_import(imported, tmp_path / "in")
    manifest, rows = run_and_read(tmp_path / "in", tmp_path / "out")
    with connect(tmp_path / "out") as connection:
        disruptions, interruptions = connection.execute(
            "select disruptions, interruptions from jobs where job_id = ?", [job]
        ).fetchone()
    assert disruptions == 1
    assert [(i["cause"], i["run_s"], i["reallocated_s"]) for i in interruptions] == [
        ("JOBSETRESTART (DefaultFailurePolicy)", 30 * 60.0, 12 * 60.0)
    ]
    assert rows[job]["all_allocated_chip_s"] == pytest.approx((100 - 10 - 12) * 60 * 8)


def _kueue_queue_streams(folder: Path) -> list[Path]:
    """ResourceFlavor `h100` (nodes labelled nvidia-h100-80gb), Cohort `research` (v1beta2, under `org`),
    ClusterQueue `cq-research` (v1beta1, cohort research): 8 H100 nominal, may borrow 4, created at 0 (a list
    of it seen at 0 with no usage); watched: at 30 it uses 12 of which 4 borrowed, at 90 8 and 0, at 120 its
    quota is raised to 16 and it uses 8. The watch runs from 0 to 180 (the collector's stamps)."""
    stamp = "2026-03-02T{:02d}:{:02d}:00Z".format

    def at_minute(minute):
        return stamp(minute // 60, minute % 60)

    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100", "uid": "rf-h100", "resourceVersion": "1", "creationTimestamp": at_minute(0)},
        "spec": {"nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}},
    }
    cohort = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Cohort",
        "metadata": {
            "name": "research",
            "uid": "co-research",
            "resourceVersion": "2",
            "creationTimestamp": at_minute(0),
        },
        "spec": {
            "parentName": "org",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "2"}]}],
                }
            ],
        },
    }

    def cluster_queue(version, nominal, usage=None):
        status = (
            {}
            if usage is None
            else {
                "flavorsUsage": [
                    {
                        "name": "h100",
                        "resources": [
                            {"name": "nvidia.com/gpu", "total": str(usage[0]), "borrowed": str(usage[1])},
                            {"name": "cpu", "total": "64", "borrowed": "0"},
                        ],
                    }
                ]
            }
        )
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {
                "name": "cq-research",
                "uid": "cq-r",
                "resourceVersion": str(version),
                "creationTimestamp": at_minute(0),
            },
            "spec": {
                "cohort": "research",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "96"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(nominal), "borrowingLimit": "4"},
                                ],
                            }
                        ],
                    }
                ],
            },
            "status": status,
        }

    queues = folder / "queues.jsonl"
    queues.write_text(
        json.dumps({"kind": "ResourceFlavorList", "items": [flavor]})
        + "\n"
        + json.dumps({"kind": "CohortList", "items": [cohort]})
        + "\n"
        + json.dumps({"kind": "ClusterQueueList", "items": [cluster_queue(3, 8)]})
        + "\n"
        + _line("MODIFIED", cluster_queue(4, 8, (12, 4)), at_minute(30))
        + _line("MODIFIED", cluster_queue(5, 8, (8, 0)), at_minute(90))
        + _line("MODIFIED", cluster_queue(6, 16, (8, 0)), at_minute(120))
    )
    nodes = folder / "nodes.jsonl"
    node = _node("gpu-0", {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, {"nvidia.com/gpu": "16"})
    node["status"]["conditions"][0].update(lastHeartbeatTime=at_minute(180), lastTransitionTime=at_minute(0))
    nodes.write_text(
        _line("ADDED", node, at_minute(0))
        + _line("MODIFIED", {**node, "metadata": {**node["metadata"], "resourceVersion": "9"}}, at_minute(180))
    )
    return [queues, nodes]


def test_cluster_queue_quota_and_borrowing_from_the_watch(tmp_path):
    """The levels by hand: nominal 8 from 0 to 120, then 16 to the as-of time 180; usage (Kueue's status)
    unknown from 0 to 30, 12 with 4 borrowed from 30 to 90, 8 and 0 from 90 on. So nominal 8 x 120 + 16 x 60
    = 1,920 GPU-min, used 12 x 60 + 8 x 90 = 1,440 GPU-min over the 150 min the status said, borrowed
    4 x 60 = 240 GPU-min. The Cohort's pool, 2 H100 under `org`, is a level of its own. Beside them, the
    chip-time its jobs held: the Workload of `_kueue_jobset_streams`, admitted to cq-research, held 8 GPUs
    from 10 to 40 and from 52 to 100: 624 GPU-min."""
    (tmp_path / "jobset").mkdir()
    files = _kueue_queue_streams(tmp_path) + _kueue_jobset_streams(tmp_path / "jobset")
    imported = read(files)
    levels = [
        (q["kind"], q["name"], q["cohort"], q["start_us"], q["nominal"], q["usage"], q["borrowed"])
        for q in imported.queue_quotas
    ]
    assert sorted(levels) == sorted(
        [
            ("Cohort", "research", "org", at(0), 2, None, None),
            ("ClusterQueue", "cq-research", "research", at(0), 8, None, None),
            ("ClusterQueue", "cq-research", "research", at(30), 8, 12, 4),
            ("ClusterQueue", "cq-research", "research", at(90), 8, 8, 0),
            ("ClusterQueue", "cq-research", "research", at(120), 16, 8, 0),
        ]
    )
    assert {q["accelerator"] for q in imported.queue_quotas} == {"h100"}
    assert {q["borrowing_limit"] for q in imported.queue_quotas if q["kind"] == "ClusterQueue"} == {4}

    write_import(imported, tmp_path / "in")
    run_and_read(tmp_path / "in", tmp_path / "out")
    with connect(tmp_path / "out") as connection:
        row = connection.execute("""
            select day::varchar, cluster_queue, cohort, accelerator, nominal_chip_s, used_chip_s, borrowed_chip_s,
                   status_known_s, held_chip_s
            from kueue_quota_daily""").fetchall()
    assert row == [
        (
            "2026-03-02",
            "cq-research",
            "research",
            "h100",
            (8 * 120 + 16 * 60) * 60.0,
            (12 * 60 + 8 * 90) * 60.0,
            4 * 60 * 60.0,
            150 * 60.0,
            (30 + 48) * 8 * 60.0,
        )
    ]
