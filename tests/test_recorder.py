"""fleet_goodput.telemetry.recorder: a training loop's events into the contract's Avro files, read back with fastavro
alone and through `mpg run`; flushed at exit, complete files only when killed, never blocking."""

from __future__ import annotations

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
from fleet_goodput.telemetry.recorder import Recorder
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
        (edge, step) for step in range(1, 13) for edge in ("STEP_START", "STEP_END")]
    for start, end in zip(steps[::2], steps[1::2]):
        low, high = brackets[start["step"]]
        assert low <= micros(start) <= micros(end) <= high
    assert {r["attempt"] for r in runtime} == {0} and len({r["event_id"] for r in runtime}) == len(runtime)
    assert [(r["step"], r["duration_s"]) for r in read_stream(telemetry, "profiler")] == [
        (step, 0.002) for step in range(1, 13)]

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


def _killed_loop(telemetry: Path, recorder_arguments: str, step_s: float, files: int, timeout_s: float,
                 before: str = "") -> int:
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
    assert runtime and all(path.suffix == ".avro" or path.name.startswith(".")
                           for path in (telemetry / "runtime").iterdir())
    assert [r["step"] for r in runtime if r["type"] == "STEP_END"] == list(range(1, len(runtime) // 2 + 1))
    write_job_scheduler(telemetry, JOB, CHIPS, micros(runtime[0]) - 1_000_000, micros(runtime[-1]) + 1_000_000)
    manifest, job = _run(telemetry, tmp_path / "out")
    assert manifest["streams"]["runtime"] == {"read": len(runtime), "accepted": len(runtime), "duplicate": 0,
                                              "rejected": 0, "late": 0, "waiting": 0, "reconciles": True}
    assert job["productive_chip_s"] > 0


def test_a_full_queue_drops_instead_of_blocking(tmp_path):
    recorder = Recorder(tmp_path, "full", roll_seconds=3600, max_queued=3)
    for step in range(1, 4):
        recorder.start("STEP", step)
    recorder.end("STEP", 3)
    recorder.close()
    assert recorder.dropped == 1
    assert [r["type"] for r in read_stream(tmp_path, "runtime")] == ["STEP_START"] * 3


@pytest.mark.parametrize("call, message", [
    (lambda r: r.span("TRAIN"), "unknown span kind 'TRAIN'"),
    (lambda r: r.start("EVAL"), "unknown span kind 'EVAL'"),
    (lambda r: r.profile(1, 0.1, 1, 1e9, flops_source="GUESSED"), "unknown flops_source 'GUESSED'"),
])
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


def test_a_save_that_raises_preserves_nothing_new(tmp_path):
    """Steps 1-10, a save of step 10 that returns, steps 11-20, a save of step 20 that raises, and the job
    fails. By hand: steps 1-10 preserved (productive), steps 11-20 lost; once, the failed save's END said
    step 20 was durable and every step counted productive."""
    telemetry = tmp_path / "in"
    recorder = Recorder(telemetry, JOB, roll_seconds=60)
    for step in range(1, 21):
        with recorder.step(step):
            time.sleep(0.01)
        if step in (10, 20):
            try:
                with recorder.span("CHECKPOINT_SAVE", step):
                    if step == 20:
                        raise OSError("disk full")
            except OSError:
                pass
    recorder.close()
    runtime = read_stream(telemetry, "runtime")
    saves = [r["step"] for r in runtime if r["type"] == "CHECKPOINT_SAVE_END"]
    assert saves == [10, 10]  # the failed save ends saying only what was durable before it
    start, end = micros(runtime[0]) - 1_000_000, micros(runtime[-1]) + 1_000_000
    write_events(telemetry / "scheduler" / "job.avro", "scheduler", [
        {"event_id": f"s{n}", "event_time": time_us, "job_id": JOB, "type": kind, "cluster": "c",
         "accelerator": "tpu-v5e", "chips": chips, "workload": "TRAINING" if kind == "SUBMIT" else None,
         "framework": None, "team": None, "topology": None, "priority": None}
        for n, (kind, time_us, chips) in enumerate([("SUBMIT", start, CHIPS), ("ALLOCATE", start, CHIPS),
                                                    ("FAIL", end, 0)])])
    _, job = _run(telemetry, tmp_path / "out")
    spans = [r for r in runtime if r["type"].startswith("STEP")]
    durations = {begin["step"]: (micros(finish) - micros(begin)) / 1e6 for begin, finish in zip(spans[::2], spans[1::2])}
    assert len(durations) == 20
    assert job["productive_chip_s"] == pytest.approx(CHIPS * sum(durations[s] for s in range(1, 11)))
    assert job["lost_chip_s"] == pytest.approx(CHIPS * sum(durations[s] for s in range(11, 21)))
