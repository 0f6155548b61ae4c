"""fleet_goodput.telemetry.recorder: a training loop's events into the contract's Avro files, read back with fastavro
alone and through `mpg run`; flushed at exit, complete files only when killed, never blocking."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fleet_goodput.cli import main
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.telemetry.recorder import Recorder, Scheduling
from job_streams import micros, read_stream, write_job_scheduler

JOB, CHIPS = "recorded-loop", 4

pytestmark = pytest.mark.slow  # subprocesses and two mpg runs, about 10 s: scheduled first (tests/conftest.py)


def _run(input_dir: Path, output_dir: Path) -> tuple[dict, dict]:
    assert main(["run", "--input", str(input_dir), "--output", str(output_dir)]) == 0
    manifest = json.loads((output_dir / "manifest.json").read_text())
    with connect(output_dir) as connection:
        cursor = connection.execute("select * from job_goodput where job_id = ?", [JOB])
        job = dict(zip([d[0] for d in cursor.description], cursor.fetchone()))
    return manifest, job


def test_a_recorded_loop_through_mpg_run(tmp_path):
    """Steps, two checkpoints and profiles as the loop recorded them: the step count and every span's times
    read back with fastavro, each inside the loop's own clock readings around it, and mpg run's figures
    equal to the sums of those times."""
    telemetry = tmp_path / "in"
    brackets = {}  # step -> the loop's own clock before and after its `with` block, µs
    with Recorder(telemetry, JOB, attempt=0) as recorder:
        with recorder.span("INIT"):
            time.sleep(0.01)
        for step in range(1, 13):
            before = time.time_ns() // 1000
            with recorder.step(step):
                time.sleep(0.002)
            brackets[step] = (before, time.time_ns() // 1000)
            if step % 6 == 0:
                with recorder.span("CHECKPOINT_SAVE", step):
                    time.sleep(0.005)
            recorder.profile(step, duration_s=0.002, chips=CHIPS, ideal_flops=1e9)
    runtime = read_stream(telemetry, "runtime")
    steps = [r for r in runtime if r["type"].startswith("STEP")]
    assert [(r["type"], r["step"]) for r in steps] == [
        (edge, step) for step in range(1, 13) for edge in ("STEP_START", "STEP_END")
    ]
    for start, end in zip(steps[::2], steps[1::2]):
        low, high = brackets[start["step"]]
        assert low <= micros(start) <= micros(end) <= high
    assert {r["attempt"] for r in runtime} == {0} and len({r["event_id"] for r in runtime}) == len(runtime)
    assert [(r["step"], r["duration_s"]) for r in read_stream(telemetry, "profiler")] == [
        (step, 0.002) for step in range(1, 13)
    ]

    first_us, last_us = micros(runtime[0]), micros(runtime[-1])
    write_job_scheduler(telemetry, JOB, CHIPS, first_us - 1_000_000, last_us + 1_000_000)
    # The same events written again (another file, other bytes: a recorder's file re-sent) are dropped by id.
    write_events(telemetry / "runtime" / "rewritten.avro", "runtime", runtime[:7], codec="null")
    manifest, job = _run(telemetry, tmp_path / "out")
    assert manifest["streams"]["runtime"]["accepted"] == len(runtime)
    assert manifest["streams"]["runtime"]["duplicate"] == 7
    assert manifest["streams"]["profiler"]["accepted"] == 12 and manifest["streams"]["runtime"]["rejected"] == 0

    def total_us(kind: str) -> int:
        spans = [r for r in runtime if r["type"].startswith(kind)]
        return sum(micros(end) - micros(start) for start, end in zip(spans[::2], spans[1::2]))

    assert job["productive_chip_s"] == pytest.approx(CHIPS * total_us("STEP") / 1e6, abs=1e-6)
    assert job["checkpoint_save_chip_s"] == pytest.approx(CHIPS * total_us("CHECKPOINT_SAVE") / 1e6, abs=1e-6)
    assert job["init_chip_s"] == pytest.approx(CHIPS * total_us("INIT") / 1e6, abs=1e-6)
    assert job["pg_coverage"] == pytest.approx(1.0)


def test_what_is_queued_is_written_at_exit(tmp_path):
    script = f"""
        from fleet_goodput.telemetry.recorder import Recorder
        recorder = Recorder({str(tmp_path)!r}, "at-exit", roll_seconds=3600)
        for step in range(5):
            with recorder.step(step):
                pass
    """
    subprocess.run([sys.executable, "-c", textwrap.dedent(script)], check=True)
    assert len(read_stream(tmp_path, "runtime")) == 10


def test_sigterm_writes_the_rest_then_ends_the_process(tmp_path):
    """A preemption's SIGTERM: with close_on_sigterm the queued events are written, then the process ends as
    SIGTERM ends it by default."""
    script = f"""
        import time
        from fleet_goodput.telemetry.recorder import Recorder
        recorder = Recorder({str(tmp_path)!r}, "preempted", roll_seconds=3600, close_on_sigterm=True)
        for step in range(1, 4):
            with recorder.step(step):
                pass
        print("ready", flush=True)
        time.sleep(60)
    """
    loop = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True)
    assert loop.stdout.readline() == "ready\n"
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(timeout=30) == -signal.SIGTERM
    assert [r["step"] for r in read_stream(tmp_path, "runtime") if r["type"] == "STEP_END"] == [1, 2, 3]


def _killed_loop(
    telemetry: Path, recorder_arguments: str, step_s: float, files: int, timeout_s: float, before: str = ""
) -> int:
    """Run a training loop recording into `telemetry` in a process of its own, SIGKILL it once `files`
    runtime files are on disk (the test fails if none come within `timeout_s`); its return code."""
    script = f"""
        import time
        from fleet_goodput.telemetry.recorder import Recorder
        recorder = Recorder({str(telemetry)!r}, {JOB!r}{recorder_arguments})
        {before}
        step = 0
        while True:
            step += 1
            with recorder.step(step):
                time.sleep({step_s})
    """
    loop = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)])
    try:
        deadline = time.monotonic() + timeout_s
        while len(list((telemetry / "runtime").glob("*.avro"))) < files:
            assert time.monotonic() < deadline and loop.poll() is None, "the loop wrote no files in time"
            time.sleep(0.01)
    finally:
        loop.send_signal(signal.SIGKILL)
        loop.wait()
    return loop.returncode


def test_a_killed_recorder_leaves_only_complete_files_that_mpg_run_reads(tmp_path):
    telemetry = tmp_path / "in"
    assert _killed_loop(telemetry, ", roll_seconds=0.02", 0.0005, files=5, timeout_s=60) == -signal.SIGKILL
    runtime = read_stream(telemetry, "runtime")  # every visible file reads whole
    assert runtime and all(
        path.suffix == ".avro" or path.name.startswith(".") for path in (telemetry / "runtime").iterdir()
    )
    assert [r["step"] for r in runtime if r["type"] == "STEP_END"] == list(range(1, len(runtime) // 2 + 1))
    write_job_scheduler(telemetry, JOB, CHIPS, micros(runtime[0]) - 1_000_000, micros(runtime[-1]) + 1_000_000)
    manifest, job = _run(telemetry, tmp_path / "out")
    assert manifest["streams"]["runtime"] == {
        "read": len(runtime),
        "accepted": len(runtime),
        "duplicate": 0,
        "rejected": 0,
        "late": 0,
        "waiting": 0,
        "reconciles": True,
    }
    assert job["productive_chip_s"] > 0


def test_a_full_queue_drops_instead_of_blocking(tmp_path):
    recorder = Recorder(tmp_path, "full", roll_seconds=3600, max_queued=3)
    for step in range(1, 4):
        recorder.start("STEP", step)
    recorder.end("STEP", 3)
    recorder.close()
    assert recorder.dropped == 1
    assert [r["type"] for r in read_stream(tmp_path, "runtime")] == ["STEP_START"] * 3


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda r: r.span("TRAIN"), "unknown span kind 'TRAIN'"),
        (lambda r: r.start("EVAL"), "unknown span kind 'EVAL'"),
        (lambda r: r.profile(1, 0.1, 1, 1e9, flops_source="GUESSED"), "unknown flops_source 'GUESSED'"),
    ],
)
def test_a_wrong_call_fails_in_the_training_code_not_in_the_writer(tmp_path, call, message):
    with Recorder(tmp_path, "wrong") as recorder, pytest.raises(ValueError, match=message):
        call(recorder)


def test_an_attempt_killed_in_its_first_seconds_leaves_its_start(tmp_path):
    """With the default roll of 60 s, an attempt SIGKILLed in its first minute once left nothing: the first
    rolls come after 1, 2, 4, ... s, so its INIT and first steps are on disk within seconds."""
    telemetry = tmp_path / "in"
    # The default roll (60 s): killed once its first file is on disk, which must come within seconds.
    init = 'recorder.start("INIT"); time.sleep(0.1); recorder.end("INIT")'
    assert _killed_loop(telemetry, "", 0.01, files=1, timeout_s=30, before=init) == -signal.SIGKILL
    runtime = read_stream(telemetry, "runtime")
    assert [r["type"] for r in runtime[:2]] == ["INIT_START", "INIT_END"]
    assert any(r["type"] == "STEP_END" for r in runtime)


# A training loop as its own process, stating its own scheduling (SUBMIT, ALLOCATE, its end): it restores from the step its checkpoint file holds (if any), steps
# STEP_S each and saves at the steps of SAVES, raising at RAISE_AT (the crash propagates: the process exits 1).
TRAINING_LOOP = """
import pathlib, sys, time
from fleet_goodput.telemetry.recorder import Recorder, Scheduling

folder, job, attempt, last_step, step_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
saves, raise_at = {int(step) for step in sys.argv[6].split(",")}, int(sys.argv[7])
checkpoint = pathlib.Path(folder, "checkpoint")
# The job states its own scheduling: no cluster exporter reports it.
recorder = Recorder(folder, job, attempt=attempt, scheduling=Scheduling("tpu-v5e", 4))
with recorder.span("INIT"):
    time.sleep(0.05)
resumed = 0
if checkpoint.exists():
    resumed = int(checkpoint.read_text())
    with recorder.span("CHECKPOINT_RESTORE", resumed):
        time.sleep(0.05)
print("started", flush=True)
for step in range(resumed + 1, last_step + 1):
    with recorder.step(step):
        time.sleep(step_s)
    if step in saves:
        with recorder.span("CHECKPOINT_SAVE", step):
            time.sleep(0.02)
            if step == raise_at:
                raise OSError("disk full")
            checkpoint.write_text(str(step))
"""


def _training_loop(
    telemetry: Path, attempt: int, last_step: int, step_s: float, saves: str, raise_at: int = 0
) -> subprocess.Popen:
    telemetry.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            TRAINING_LOOP,
            str(telemetry),
            JOB,
            str(attempt),
            str(last_step),
            str(step_s),
            saves,
            str(raise_at),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _chip_s(records: list[dict], kind: str, steps=None) -> float:
    """CHIPS x the time of the `kind` spans among `records` (one attempt's, in order), those ending at
    `steps` only (STEP_END's step) when given: hand arithmetic on the times read back."""
    spans = [r for r in records if r["type"].startswith(kind + "_")]
    pairs = [(begin, end) for begin, end in zip(spans[::2], spans[1::2]) if steps is None or end["step"] in steps]
    assert all(begin["type"].endswith("_START") and end["type"].endswith("_END") for begin, end in pairs)
    return CHIPS * sum(micros(end) - micros(begin) for begin, end in pairs) / 1e6


def test_a_loop_whose_save_raises_preserves_nothing_new(tmp_path):
    """Steps 1-20 of 10 ms, a save of step 10 that returns, a save of step 20 that raises: the process crashes
    (exit 1) and the job fails. By hand, from the times read back: steps 1-10 preserved (productive), steps
    11-20 lost, both saves' time saving. Once the failed save's END said step 20 was durable, and every step
    counted productive."""
    telemetry = tmp_path / "in"
    loop = _training_loop(telemetry, attempt=0, last_step=30, step_s=0.01, saves="10,20", raise_at=20)
    _, stderr = loop.communicate(timeout=60)
    assert loop.returncode == 1 and "OSError: disk full" in stderr
    runtime = read_stream(telemetry, "runtime")
    assert [r["step"] for r in runtime if r["type"] == "CHECKPOINT_SAVE_END"] == [10, 10]  # the failed one: 10
    scheduler = read_stream(telemetry, "scheduler")
    assert [(r["type"], r["reason"]) for r in scheduler] == [  # SUBMIT and ALLOCATE at one time: in id order
        ("ALLOCATE", None),
        ("SUBMIT", None),
        ("FAIL", "CRASHED: OSError: disk full"),
    ]
    _, job = _run(telemetry, tmp_path / "out")
    assert (job["status"], job["lifetime_chip_s"]) == (
        "FAILED",
        pytest.approx(CHIPS * (micros(scheduler[-1]) - micros(scheduler[0])) / 1e6),
    )
    assert job["productive_chip_s"] == pytest.approx(_chip_s(runtime, "STEP", range(1, 11)))
    assert job["lost_chip_s"] == pytest.approx(_chip_s(runtime, "STEP", range(11, 21)))
    assert job["checkpoint_save_chip_s"] == pytest.approx(_chip_s(runtime, "CHECKPOINT_SAVE"))
    assert job["unended_runs"] == 0  # the crash ended its spans, and the recorder's FAIL marks the end


def test_a_loop_killed_after_5_s_and_restarted_gives_the_hand_figures(tmp_path):
    """An attempt of 50 ms steps saving at step 20 is SIGKILLed 5 s in (the default roll: on disk are the
    events of its first rolls, after 1 and 3 s); a second attempt restores step 20 and runs steps 21-40; the
    job finishes. By hand, from the times read back: the first attempt's steps 1-20 and the second's 21-40
    productive; the first attempt's steps after 20 on disk lost, and so is the time from its last step on
    disk to the second attempt's INIT (a step it left open, closed by the restart). Once the killed attempt
    left nothing: its steps and save showed as idle."""
    telemetry = tmp_path / "in"
    first = _training_loop(telemetry, attempt=0, last_step=10_000, step_s=0.05, saves="20")
    assert first.stdout.readline() == "started\n"
    time.sleep(5)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = read_stream(telemetry, "runtime")
    assert (telemetry / "checkpoint").read_text() == "20"
    assert any(r["type"] == "CHECKPOINT_SAVE_END" for r in killed), "the first rolls left the save on disk"
    second = _training_loop(telemetry, attempt=1, last_step=40, step_s=0.01, saves="40")
    assert second.wait(timeout=60) == 0
    runtime = read_stream(telemetry, "runtime")
    restarted = [r for r in runtime if r["attempt"] == 1]
    # The killed attempt wrote its SUBMIT and ALLOCATE (in its first roll) and no end; the second its own
    # ALLOCATE and FINISH.
    scheduler = read_stream(telemetry, "scheduler")
    assert [r["type"] for r in scheduler] == ["ALLOCATE", "SUBMIT", "ALLOCATE", "FINISH"]  # one time: id order
    manifest, job = _run(telemetry, tmp_path / "out")
    assert job["status"] == "FINISHED" and manifest["streams"]["scheduler"]["rejected"] == 0
    assert manifest["streams"]["runtime"]["rejected"] == 0
    steps_on_disk = [r["step"] for r in killed if r["type"] == "STEP_END"]
    left_open = killed[-1]["type"] == "STEP_START"  # killed mid-step after a roll
    lost = _chip_s(killed, "STEP", range(21, 10_001))
    if left_open:
        lost += CHIPS * (micros(restarted[0]) - micros(killed[-1])) / 1e6
    assert max(steps_on_disk) > 20
    assert job["productive_chip_s"] == pytest.approx(
        _chip_s(killed, "STEP", range(1, 21)) + _chip_s(restarted, "STEP"), abs=1e-6
    )
    assert job["lost_chip_s"] == pytest.approx(lost, abs=1e-6)
    assert job["checkpoint_save_chip_s"] == pytest.approx(
        _chip_s(killed, "CHECKPOINT_SAVE") + _chip_s(restarted, "CHECKPOINT_SAVE"), abs=1e-6
    )
    assert job["checkpoint_restore_chip_s"] == pytest.approx(_chip_s(restarted, "CHECKPOINT_RESTORE"), abs=1e-6)
    assert job["unended_runs"] == 1  # the killed run: flagged on its job


@pytest.mark.parametrize(
    "attempt, scheduling, ending, expected",
    [
        (
            0,
            Scheduling("h100", 8),
            "raises",
            [("SUBMIT", 8, None), ("ALLOCATE", 8, None), ("FAIL", 0, "CRASHED: ValueError: boom")],
        ),
        (
            2,
            Scheduling("h100", 8, restarted_on_failure=True),
            "raises",
            [("ALLOCATE", 8, None), ("PREEMPT", 0, "CRASHED: ValueError: boom")],
        ),
        (None, Scheduling("h100", 8), "returns", [("SUBMIT", 8, None), ("ALLOCATE", 8, None), ("FINISH", 0, None)]),
        (1, Scheduling("h100", 8), "cancelled", [("ALLOCATE", 8, None), ("CANCEL", 0, "by its owner")]),
    ],
)
def test_a_stated_scheduling_writes_the_attempt_s_start_and_end(tmp_path, attempt, scheduling, ending, expected):
    """The first attempt (0 or unknown) submits; every attempt allocates; its end is FINISH, FAIL on an
    exception (PREEMPT where a launcher restarts failed attempts), or what close() is told."""
    with pytest.raises(ValueError, match="boom") if ending == "raises" else contextlib.nullcontext():
        with Recorder(tmp_path, "stated", attempt=attempt, scheduling=scheduling) as recorder:
            if ending == "raises":
                raise ValueError("boom")
            if ending == "cancelled":
                recorder.close("CANCEL", "by its owner")
    records = sorted(read_stream(tmp_path, "scheduler"), key=lambda r: (r["event_time"], r["type"] != "SUBMIT"))
    assert [(r["type"], r["chips"], r["reason"]) for r in records] == expected
    assert {(r["cluster"], r["accelerator"]) for r in records} == {("local", "h100")}
    assert [r["workload"] for r in records if r["type"] == "SUBMIT"] in ([], ["TRAINING"])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Scheduling("h100", 0), "chips must be a positive whole number"),
        (lambda: Scheduling("h100", 8, workload="EVAL"), "unknown workload 'EVAL'"),
        (lambda: Scheduling("", 8), "accelerator and cluster must be named"),
    ],
)
def test_a_wrong_scheduling_fails_in_the_training_code(make, message):
    with pytest.raises(ValueError, match=message):
        make()
