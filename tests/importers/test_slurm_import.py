"""`mpg import slurm`: the accounting of a real Slurm (recorded from tests/slurm_box.py into
tests/data/slurm), awkward rows, and the pipeline's figures against Slurm's own numbers."""

from __future__ import annotations

import json

import fastavro
import pytest

from fleet_goodput.importers.reading import MICROS
from fleet_goodput.importers.slurm import AcceleratorMap
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.views import connect
from slurm_truth import capacity_chip_seconds, interruptions, job_chip_seconds
from importing import FIXTURES, SETTINGS, by_job, import_to, rejected_rows

SAMPLE = FIXTURES / "slurm"
HEADER = (
    "JobID|JobIDRaw|Cluster|Partition|Account|QOS|Priority|State|ExitCode|Reason|Submit|Eligible|Start|End|"
    "Timelimit|ReqTRES|AllocTRES|NodeList|SubmitLine"
)
H100 = "billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,node=1"


def _t(text: str) -> int:
    from calendar import timegm
    from time import strptime

    return timegm(strptime(text, "%Y-%m-%dT%H:%M:%S")) * MICROS


def _events(imported, job):
    return [(r["type"], r["event_time"], r["chips"], r["reason"]) for r in by_job(imported, "scheduler", job)]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return import_to("slurm", SAMPLE, tmp_path_factory.mktemp("slurm") / "in")


def test_every_scenario_of_the_box_maps_as_documented(sample):
    imported, summary = sample
    assert summary["jobs"] == 13 and summary["rejected"] == {"CPU-only job (no gres/gpu in ReqTRES or AllocTRES)": 1}
    # Preempted by a job of the higher-tier partition, requeued and run again.
    assert _events(imported, "testfleet/4") == [
        ("SUBMIT", _t("2026-11-26T04:30:43"), 4, None),
        ("ALLOCATE", _t("2026-11-26T04:30:44"), 4, None),
        ("PREEMPT", _t("2026-11-26T04:30:46"), 0, "PREEMPTED"),
        ("ALLOCATE", _t("2026-11-26T04:30:52"), 4, None),
        ("FINISH", _t("2026-11-26T04:30:53"), 0, "COMPLETED"),
    ]
    # Its node set down: NODE_FAIL, with the node's reason from the event.
    assert _events(imported, "testfleet/5")[2] == (
        "PREEMPT",
        _t("2026-11-26T04:30:46"),
        0,
        "NODE_FAIL: xid 79: GPU has fallen off the bus",
    )
    assert _events(imported, "testfleet/9")[2][3] == "REQUEUED"
    assert _events(imported, "testfleet/1")[-1] == ("FAIL", _t("2026-11-26T04:32:12"), 0, "TIMEOUT")
    assert _events(imported, "testfleet/7")[-1][::3] == ("FAIL", "FAILED (exit 3:0)")
    assert _events(imported, "testfleet/8")[-1][::3] == ("CANCEL", "CANCELLED by 0")
    # Waited for busy GPUs: queued from 04:30:43 to 04:30:49.
    assert _events(imported, "testfleet/3")[1][:2] == ("ALLOCATE", _t("2026-11-26T04:30:49"))
    assert {r["job_id"] for r in imported.streams["scheduler"]} >= {
        "testfleet/10_0",
        "testfleet/10_1",
        "testfleet/10_2",
    }
    submits = {r["job_id"]: r for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"}
    assert (
        submits["testfleet/6"]["accelerator"],
        submits["testfleet/6"]["team"],
        submits["testfleet/6"]["queue"],
        submits["testfleet/14"]["queue"],
        submits["testfleet/6"]["priority"],
    ) == ("a100", "vision", "batch", "urgent", 1000)
    capacity = sorted(
        (r["accelerator"], r["event_time"], r["chips"])
        for r in imported.streams["scheduler"]
        if r["type"] == "CAPACITY"
    )
    start = _t("2026-11-26T04:30:43")
    assert capacity == [
        ("a100", start, 4),
        ("h100", start, 12),
        ("h100", _t("2026-11-26T04:30:46"), 8),
        ("h100", _t("2026-11-26T04:30:48"), 12),  # down
        ("h100", _t("2026-11-26T04:30:55"), 8),
        ("h100", _t("2026-11-26T04:30:58"), 12),
    ]  # drained


def test_the_pipeline_equals_slurms_own_numbers(sample, tmp_path):
    """Queued and allocated chip-seconds per job, capacity less each node's downtime, and each attempt
    that stopped early (cause, time run, time until it ran again), computed from the sacct and sacctmgr
    text alone (tests/slurm_truth.py), equal the pipeline's."""
    check_against_slurm(SAMPLE, tmp_path / "in", tmp_path / "out")


def _partitions(sacct, jobs) -> dict[str, str]:
    """Each job's Partition, read from the `sacct --parsable2` text alone: `<cluster>/<JobID>` → partition."""
    lines = sacct.read_text().splitlines()
    header = lines[0].split("|")
    rows = [dict(zip(header, line.split("|"))) for line in lines[1:] if line.count("|") >= len(header) - 1]
    return {
        f"{row['Cluster']}/{row['JobID']}": row["Partition"]
        for row in rows
        if f"{row['Cluster']}/{row['JobID']}" in jobs
    }


def check_against_slurm(source, imported_dir, output, capacity_from_s: int | None = None) -> None:
    """Import `source` into `imported_dir` (unless it holds a collection already), run the pipeline, and
    compare with tests/slurm_truth.py; capacity counts from `capacity_from_s` (default: the first submission)."""
    if not imported_dir.exists():
        import_to("slurm", source, imported_dir)
    first, last, online = capacity_chip_seconds(
        source / "sacct.txt", source / "events.txt", source / "nodes.txt", capacity_from_s
    )
    outcome = run_batch(str(imported_dir), str(output), SETTINGS, given_as_of_us=last * MICROS, build_views=False)
    assert outcome.manifest["reconciles"]
    with connect(output) as connection:
        jobs = {
            row[0]: {"queued_chip_s": row[1], "all_allocated_chip_s": row[2]}
            for row in connection.execute(
                "select job_id, queued_chip_s, all_allocated_chip_s from job_goodput"
            ).fetchall()
        }
        capacity = dict(
            connection.execute(
                "select accelerator, sum(capacity_chip_s) from capacity_window group by accelerator"
            ).fetchall()
        )
        ended = {row[0]: row[1] for row in connection.execute("select job_id, end_reason from jobs").fetchall()}
        stops = set(connection.execute("select job_id, cause, run_s, reallocated_s from interruptions").fetchall())
        queues = dict(connection.execute("select distinct job_id, queue from interruptions").fetchall())
    assert stops == interruptions(source / "sacct.txt")
    assert queues == _partitions(source / "sacct.txt", queues)  # interruptions by partition: the job's queue
    truth = job_chip_seconds(source / "sacct.txt")
    assert truth and {job: jobs[job] for job in truth} == truth  # whole seconds: exact
    assert capacity == online
    assert all(ended[job] for job in truth)


# ---- awkward rows ------------------------------------------------------------------
def _write(folder, rows: list[str], nodes: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sacct.txt").write_bytes(("\n".join([HEADER, *rows]) + "\n").encode("utf-8", "surrogateescape"))
    if nodes is not None:
        (folder / "nodes.txt").write_text(nodes)


def _row(
    job="42",
    state="COMPLETED",
    submit="2026-03-01T10:00:00",
    start="2026-03-01T10:00:05",
    end="2026-03-01T11:00:00",
    req=H100,
    alloc=H100,
    partition="batch",
    account="llm",
    submit_line="sbatch run.sh",
    reason="None",
    eligible=None,
) -> str:
    return "|".join(
        [
            job,
            job,
            "edge",
            partition,
            account,
            "normal",
            "7",
            state,
            "0:0",
            reason,
            submit,
            submit if eligible is None else eligible,
            start,
            end,
            "UNLIMITED",
            req,
            alloc,
            "n1",
            submit_line,
        ]
    )


def test_awkward_rows_are_handled_or_rejected_with_a_reason(tmp_path):
    _write(
        tmp_path / "src",
        [
            _row("1", submit_line="sbatch --wrap 'echo one\necho two | tee x'"),  # multi-line, with a |
            _row("2", submit_line="sbatch caf\udce9.sh"),  # invalid UTF-8 where it does not matter: kept
            _row("3", account="t\udce9am"),  # invalid UTF-8 in the team: rejected
            _row("4", state="PENDING", start="Unknown", end="Unknown", alloc=""),  # queued: SUBMIT only
            _row("5", state="RUNNING", end="Unknown"),  # running: no end yet
            _row("6_[1-3%2]", state="PENDING", start="None", end="Unknown", alloc=""),  # a pending array range
            _row("7", state="CANCELLED by 1000", start="None", alloc=""),  # cancelled while queued
            _row("8", req="billing=1,cpu=4,mem=1G,node=1", alloc="billing=1,cpu=4,node=1"),  # CPU-only
            _row("9.batch"),  # a step: sacct ran without --allocations
            _row("10", submit="Unknown"),
            _row("11", start="2026-03-01T09:00:00"),  # starts before it was submitted
            _row("12", req="gres/gpu=2", alloc="gres/gpu=2", partition="gpu-old"),  # no GRES type: by partition
            _row("13", req="gres/gpu=2", alloc="gres/gpu=2", partition="mystery"),  # no GRES type, no map entry
            _row("14", end="4102444800"),  # epoch seconds (SLURM_TIME_FORMAT=%s) of 2100-01-01: past the contract
            _row("15", req="gres/gpu:h100=4000000000", alloc=""),  # more GPUs than any fleet holds (and an Avro int)
            _row("16.0", req="", alloc="billing=1,cpu=4,node=1"),  # a step as sacct lists it: no TRES of its own
        ],
    )
    mapping = AcceleratorMap(partitions={"gpu-old": "v100"})
    imported, summary = import_to("slurm", tmp_path / "src", tmp_path / "out", accelerator_map=mapping)
    reasons = {row["item"]: row["reason"] for row in rejected_rows(tmp_path / "out")}
    assert reasons == {
        "edge/3": "invalid UTF-8",
        "edge/8": "CPU-only job (no gres/gpu in ReqTRES or AllocTRES)",
        "edge/9.batch": "not a job allocation's JobID (a step? pass --allocations)",
        "edge/16.0": "not a job allocation's JobID (a step? pass --allocations)",
        "edge/10": "no Submit time",
        "edge/11": "Start before Submit",
        "edge/13": "GPU type not in the accelerator map",
        "edge/14": "End is not a time from 1970 up to 2100",
        "edge/15": "gres/gpu is not a whole number of chips from 1 to 1,048,576",
    }
    kinds = {
        job: [r["type"] for r in by_job(imported, "scheduler", job)]
        for job in ("edge/1", "edge/2", "edge/4", "edge/5", "edge/6_1", "edge/6_3", "edge/7", "edge/12")
    }
    assert kinds == {
        "edge/1": ["SUBMIT", "ALLOCATE", "FINISH"],
        "edge/2": ["SUBMIT", "ALLOCATE", "FINISH"],
        "edge/4": ["SUBMIT"],
        "edge/5": ["SUBMIT", "ALLOCATE"],
        "edge/6_1": ["SUBMIT"],
        "edge/6_3": ["SUBMIT"],
        "edge/7": ["SUBMIT", "CANCEL"],
        "edge/12": ["SUBMIT", "ALLOCATE", "FINISH"],
    }
    assert by_job(imported, "scheduler", "edge/12")[0]["accelerator"] == "v100"
    assert by_job(imported, "scheduler", "edge/7")[-1]["reason"] == "CANCELLED by 1000"
    caveats = [json.loads(line) for line in (tmp_path / "out" / "import_caveats.jsonl").read_text().splitlines()]
    assert {(c["item"], c["caveat"]) for c in caveats} >= {("edge/2", "invalid UTF-8 replaced")}
    assert summary["jobs"] == 9  # 1, 2, 4, 5, 6_1, 6_2, 6_3, 7, 12


def test_held_jobs_keep_their_true_status_and_a_row_listed_twice_is_read_once(tmp_path):
    """Rows as Slurm 22.05 lists jobs submitted with --hold (tests/slurm_box.py): one cancelled while held,
    one still held, one held then released; sacct.txt holds the eligible listing, then the listing of
    every job that ended, which repeats the released one's row (docs/slurm.md)."""
    held = dict(reason="JobHeldUser", eligible="Unknown", alloc="")
    released = _row(
        "22",
        reason="JobHeldUser",
        submit="2026-03-01T10:00:00",
        eligible="2026-03-01T10:00:30",
        start="2026-03-01T10:00:30",
        end="2026-03-01T10:01:00",
    )
    _write(
        tmp_path / "src",
        [
            released,
            _row("21", state="CANCELLED by 0", start="None", end="2026-03-01T10:00:20", **held),
            _row("23", state="PENDING", start="Unknown", end="Unknown", **held),
            released,
        ],
        nodes="NodeName=n1 Gres=gpu:h100:8 Partitions=batch\n",
    )
    imported, summary = import_to("slurm", tmp_path / "src", tmp_path / "in")
    assert summary["rejected"] == {}
    caveats = [json.loads(line) for line in (tmp_path / "in" / "import_caveats.jsonl").read_text().splitlines()]
    assert [(c["item"], c["caveat"], c["detail"]) for c in caveats] == [
        ("edge/23", "held: PENDING and not eligible to start; its wait counts the hold", "JobHeldUser")
    ]
    assert _events(imported, "edge/21") == [
        ("SUBMIT", _t("2026-03-01T10:00:00"), 2, None),
        ("CANCEL", _t("2026-03-01T10:00:20"), 0, "CANCELLED by 0 (never started: JobHeldUser)"),
    ]
    assert [kind for kind, *_ in _events(imported, "edge/22")] == ["SUBMIT", "ALLOCATE", "FINISH"]
    assert [kind for kind, *_ in _events(imported, "edge/23")] == ["SUBMIT"]
    run_batch(
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        SETTINGS,
        given_as_of_us=_t("2026-03-01T10:05:00"),
        build_views=False,
    )
    with connect(tmp_path / "out") as connection:
        jobs = {
            row[0]: row[1:]
            for row in connection.execute(
                "select job_id, jobs.status, end_reason, first_running_time is null, held_chip_s, queued_chip_s "
                "from jobs join job_goodput using (job_id)"
            ).fetchall()
        }
    # By hand: 21 waited 20 s holding nothing (2 GPUs: 40 chip-s queued); 22 waited 30 s and held 2 GPUs
    # 30 s; 23 waits from 10:00 to the as-of time 10:05 (600 chip-s queued).
    assert jobs == {
        "edge/21": ("CANCELLED", "CANCELLED by 0 (never started: JobHeldUser)", True, 0.0, 40.0),
        "edge/22": ("FINISHED", "COMPLETED", False, 60.0, 60.0),
        "edge/23": ("PENDING", None, True, 0.0, 600.0),
    }


def test_a_truncated_sacct_file_stops_the_import_and_writes_nothing(tmp_path):
    from fleet_goodput.importers.common import SourceError

    _write(tmp_path / "src", [_row("1"), _row("2")])
    text = (tmp_path / "src" / "sacct.txt").read_bytes()
    (tmp_path / "src" / "sacct.txt").write_bytes(text[:-40])
    with pytest.raises(SourceError, match=r"sacct.txt:line 3: the last line does not end: is the file truncated\?"):
        import_to("slurm", tmp_path / "src", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_accelerator_map_is_read_as_every_settings_file(tmp_path):
    """--accelerator-map goes through config.read_yaml: an alias bomb is refused before it is built."""
    path = tmp_path / "map.yaml"
    path.write_text(
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join([f'*{chr(97 + n)}'] * 10)}]\n" for n in range(5))
    )
    with pytest.raises(ValueError, match="more than 100,000 values"):
        AcceleratorMap.load(path)
    path.write_text("gres_types: {H100_80GB: h100}\npartitions: {gpu-old: v100}\n")
    mapping = AcceleratorMap.load(path)
    assert (mapping.gres_types["h100_80gb"], mapping.partitions["gpu-old"]) == ("h100", "v100")


def test_times_read_in_the_zone_sacct_printed_them_in(tmp_path):
    """Europe/Berlin, around the end of summer time (2026-10-25 03:00 CEST → 02:00 CET) and midnight."""
    _write(
        tmp_path / "src",
        [
            _row("1", submit="2026-10-24T23:59:30", start="2026-10-25T00:00:10", end="2026-10-25T03:30:00"),
            _row("2", submit="2026-10-25T02:30:00", start="2026-10-25T02:40:00", end="2026-10-25T04:00:00"),
            _row("3", submit="2026-03-29T02:30:00"),  # skipped by the spring change: no such wall time
        ],
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out", timezone="Europe/Berlin")
    first = by_job(imported, "scheduler", "edge/1")
    # 23:59:30 CEST is 21:59:30 UTC; 03:30 CET (after the change) is 02:30 UTC: 4 h 30 min 30 s later.
    assert [r["event_time"] for r in first] == [
        _t("2026-10-24T21:59:30"),
        _t("2026-10-24T22:00:10"),
        _t("2026-10-25T02:30:00"),
    ]
    # 02:30 happens twice that night: read as the first (CEST), with a caveat.
    assert by_job(imported, "scheduler", "edge/2")[0]["event_time"] == _t("2026-10-25T00:30:00")
    caveats = (tmp_path / "out" / "import_caveats.jsonl").read_text()
    assert "repeated daylight-saving hour" in caveats and "edge/2" in caveats
    assert [r["reason"] for r in rejected_rows(tmp_path / "out")] == [
        "Submit does not exist in Europe/Berlin (skipped by a daylight-saving change)"
    ]


def test_reason_and_queue_reach_the_avro_file(sample, tmp_path):
    """`reason` is in the contract; `queue` (the partition) is dropped by the writer until the contract has it."""
    import_to("slurm", SAMPLE, tmp_path / "in")
    with open(next((tmp_path / "in" / "scheduler").glob("*.avro")), "rb") as handle:
        records = list(fastavro.reader(handle))
    assert {r["reason"] for r in records if r["job_id"] == "testfleet/1" and r["type"] == "FAIL"} == {"TIMEOUT"}


def test_a_node_out_at_the_first_submission_lowers_the_first_level(tmp_path):
    """One level per instant: the origin's level already counts the node that is out then; an outage
    over before the origin changes nothing; one still going never returns its GPUs."""
    _write(
        tmp_path / "src",
        [_row("1", submit="2026-03-01T10:00:00", end="2026-03-01T12:00:00")],
        nodes="NodeName=n1 Gres=gpu:h100:8 Partitions=batch\nNodeName=n2 Gres=gpu:h100:8 Partitions=batch\n"
        "NodeName=n3 Gres=gpu:h100:8 Partitions=batch\n",
    )
    (tmp_path / "src" / "events.txt").write_text(
        "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User|Event|TRES\n"
        "edge|n1|2026-03-01T09:00:00|2026-03-01T10:30:00|DOWN|psu|root(0)|Node|gres/gpu:h100=8\n"
        "edge|n2|2026-02-01T09:00:00|2026-02-01T10:30:00|DOWN|old|root(0)|Node|gres/gpu:h100=8\n"
        "edge|n3|2026-03-01T11:00:00|Unknown|DRAIN|rma|root(0)|Node|gres/gpu:h100=8\n"
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out")
    levels = [(r["event_time"], r["chips"]) for r in imported.streams["scheduler"] if r["type"] == "CAPACITY"]
    assert sorted(levels) == [
        (_t("2026-03-01T10:00:00"), 16),
        (_t("2026-03-01T10:30:00"), 24),
        (_t("2026-03-01T11:00:00"), 16),
    ]


def test_gpus_listed_only_in_a_nodes_configured_tres_count_in_capacity(tmp_path):
    """Some sites declare GPUs without a Gres line: `scontrol show node -o` then lists them only in
    CfgTRES. Node n1 (Gres=(null), CfgTRES gres/gpu:h100=8) and n2 (Gres=gpu:h100:4) give 12 h100."""
    _write(
        tmp_path / "src",
        [_row("1", submit="2026-03-01T10:00:00", end="2026-03-01T12:00:00")],
        nodes="NodeName=n1 Gres=(null) CfgTRES=cpu=64,mem=512G,billing=64,gres/gpu:h100=8 Partitions=batch\n"
        "NodeName=n2 Gres=gpu:h100:4 CfgTRES=cpu=64,mem=512G,gres/gpu=4 Partitions=batch\n",
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out")
    levels = [(r["accelerator"], r["chips"]) for r in imported.streams["scheduler"] if r["type"] == "CAPACITY"]
    assert levels == [("h100", 12)]


# ---- the collector, where no Slurm is needed ----------------------------------------------
def test_one_collection_at_a_time_and_a_clear_error_without_slurm(tmp_path):
    import fcntl
    import os
    import subprocess
    import sys

    from fleet_goodput.importers.slurm_collect import STATE_DIR, CollectBusy, collect
    from importing import options

    (tmp_path / "out" / STATE_DIR).mkdir(parents=True)
    with open(tmp_path / "out" / STATE_DIR / "lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(CollectBusy, match="another `mpg collect` is polling"):
            collect(tmp_path / "out", options(), since_us=0)
    command = [sys.executable, "-m", "fleet_goodput.cli", "collect", "slurm", "--out", str(tmp_path / "new")]
    done = subprocess.run(command, env={**os.environ, "PATH": str(tmp_path)}, capture_output=True, text=True)
    assert done.returncode == 1
    assert "sacct is not installed (the Slurm client tools are needed)" in done.stderr
    assert not list((tmp_path / "new").glob("scheduler/*"))


def test_deploys_collector_unit_and_cron_line_call_a_command_mpg_accepts():
    """deploy/mpg-collect-slurm.{service,cron}: the command they run parses as `mpg collect slurm`, the
    service may write the telemetry folder that mpg-daily.service only reads, and both treat 75 (the
    previous poll still running) as no failure."""
    import configparser
    import shlex
    from pathlib import Path

    from fleet_goodput.cli import build_parser

    deploy = Path(__file__).parents[2] / "deploy"
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((deploy / "mpg-collect-slurm.service").read_text())
    command = shlex.split(shlex.split(unit["Service"]["ExecStart"])[2])  # sh -c '<command>'
    assert command[0] == "exec" and command[1].endswith("/mpg")
    argv = [part.replace("$IN", "/in") for part in command[2:]]
    args = build_parser(argv).parse_args(argv)
    assert command[2:4] == ["collect", "slurm"] and (args.source, args.out) == ("slurm", "/in")
    assert unit["Service"]["SuccessExitStatus"] == "75"
    assert "/var/lib/fleet-goodput/telemetry" in unit["Service"]["ReadWritePaths"]
    daily = configparser.ConfigParser(strict=False, interpolation=None)
    daily.read_string((deploy / "mpg-daily.service").read_text())
    assert daily["Service"]["ReadOnlyPaths"] == unit["Service"]["ReadWritePaths"]  # one writes, the other reads
    cron = [
        line
        for line in (deploy / "mpg-collect-slurm.cron").read_text().splitlines()
        if line and not line.startswith("#") and "=" not in line.split()[0]
    ]
    assert len(cron) == 1 and "$MPG collect slurm --out $IN -q" in cron[0] and "[ $code = 75 ]" in cron[0]


def test_each_importer_has_its_own_help_with_its_own_flags_and_an_example(capsys, tmp_path):
    from fleet_goodput.cli import main

    with pytest.raises(SystemExit):
        main(["import", "slurm", "--help"])
    slurm = capsys.readouterr().out
    assert "--timezone ZONE" in slurm and "--accelerator-map FILE" in slurm and "--chips" not in slurm
    assert "example:\n  mpg import slurm tests/data/slurm --out slurm/" in slurm
    with pytest.raises(SystemExit):
        main(["import", "logs", "--help"])
    logs = capsys.readouterr().out
    assert "--profile NAME" in logs and "--chips N" in logs and "--timezone" not in logs
    assert "--profile is required; --job, --accelerator and --chips where the log does not print them" in logs
    # A flag of another format is refused by name, with the nearest of this format's.
    with pytest.raises(SystemExit):
        main(["import", "slurm", "tests/data/slurm", "--out", str(tmp_path / "o"), "--chips", "4"])
    assert "unknown option --chips" in capsys.readouterr().err
