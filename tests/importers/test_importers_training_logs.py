"""`mpg import logs`: Megatron-LM and NeMo stdout through log profiles (fixtures in tests/data/logs, see its README).

Expected figures are computed by hand from the logs: in seconds after a round time
before each log starts (for the fixtures, the tables of tests/data/README.md), times the chips.
"""

from __future__ import annotations

import json

import pytest

from fleet_goodput.cli import main
from fleet_goodput.core.timeutil import parse_time_us
from fleet_goodput.importers.common import SourceError, UsageError
from importing import FIXTURES, by_job, import_to, rejected_rows, run_and_read, tree_bytes

LOGS = FIXTURES / "logs"
MEGATRON = {"profile": "megatron", "job": "gpt-8b", "accelerator": "h100", "chips": 16}
NEMO = {"profile": "nemo", "job": "llama3-8b", "accelerator": "h100", "chips": 8}


def seconds(time_us: int, origin: str) -> float:
    return (time_us - parse_time_us(origin)) / 1e6


def blocks(imported, job: str, origin: str) -> list[tuple]:
    runtime = [r for r in by_job(imported, "runtime", job) if r["type"].startswith("STEP")]
    return [
        (a["attempt"], a["step"], b["step"], seconds(a["event_time"], origin), seconds(b["event_time"], origin))
        for a, b in zip(runtime[::2], runtime[1::2])
    ]


# ---- Megatron-LM: two launches of one job, the restart's file first by name --------------
@pytest.fixture(scope="module")
def megatron(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron")
    imported, summary = import_to(
        "logs", LOGS / "megatron", root / "in", submit_us=parse_time_us("2025-06-10T07:58:00Z"), **MEGATRON
    )
    manifest, jobs = run_and_read(root / "in", root / "out")
    return imported, summary, manifest, jobs["gpt-8b"]


def test_megatron_iterations_checkpoints_and_restart_are_read_from_the_log(megatron):
    imported, summary, _, _ = megatron
    assert summary["rejected"] == {}
    assert [(c.caveat, c.detail) for c in imported.caveats] == [
        (
            "times derived, not stated: placed from the last timestamp by step times and stated durations",
            "0 iteration blocks, 3 checkpoint saves, 1 restores",
        )
    ]
    origin = "2025-06-10T08:00:00Z"
    # Files ordered by their first timestamp (node07 at 08:00:40 before node03 at 08:05:35), not by name.
    assert [(r["type"], seconds(r["event_time"], origin)) for r in by_job(imported, "scheduler", "gpt-8b")] == [
        ("SUBMIT", -120.0),
        ("ALLOCATE", 0.0),
        ("PREEMPT", 226.0),
        ("ALLOCATE", 300.0),
        ("FINISH", 422.0),
    ]
    # Each iteration line: 10 iterations of 3000.0 ms ending at its timestamp.
    assert blocks(imported, "gpt-8b", origin) == [
        (0, 1, 10, 60.0, 90.0),
        (0, 11, 20, 90.0, 120.0),
        (0, 21, 30, 128.0, 158.0),
        (0, 31, 40, 158.0, 188.0),
        (0, 41, 50, 196.0, 226.0),
        (1, 41, 50, 353.0, 383.0),
        (1, 51, 60, 383.0, 413.0),
    ]
    spans = [
        (r["type"], seconds(r["event_time"], origin), r["step"])
        for r in by_job(imported, "runtime", "gpt-8b")
        if r["type"].startswith("CHECKPOINT")
    ]
    # Saves: no timestamp on the save lines, so from the end of the block for the save-checkpoint timer's max;
    # the load: from the last timestamp (after megatron is initialized) for the load-checkpoint timer's max.
    assert spans == [
        ("CHECKPOINT_SAVE_START", 120.0, 20),
        ("CHECKPOINT_SAVE_END", 128.0, 20),
        ("CHECKPOINT_SAVE_START", 188.0, 40),
        ("CHECKPOINT_SAVE_END", 196.0, 40),
        ("CHECKPOINT_RESTORE_START", 335.0, 40),
        ("CHECKPOINT_RESTORE_END", 347.0, 40),
        ("CHECKPOINT_SAVE_START", 413.0, 60),
        ("CHECKPOINT_SAVE_END", 421.0, 60),
    ]
    samples = by_job(imported, "profiler", "gpt-8b")
    # The argument listing says `bf16 ... True` and `fp8 ... None`.
    assert [(s["flops_source"], s["step"], s["duration_s"], s["precision"]) for s in samples][:1] == [
        ("ANALYTIC", 10, 3.0, "bf16")
    ]
    # TFLOP/s/GPU x 1e12 x s per iteration x world size = FLOPs of one iteration of the whole job.
    assert [s["ideal_flops"] for s in samples] == pytest.approx(
        [t * 1e12 * 3.0 * 16 for t in (400, 400, 410, 410, 405, 395, 395)]
    )


def test_megatron_end_to_end_figures_match_the_hand_computation(megatron):
    _, _, manifest, job = megatron
    assert manifest["reconciles"] and job["status"] == "FINISHED"
    # queued: submit 07:58 to 08:00 (120 s) and the gap between the launches (226 to 300 s, no chips).
    # Attempt 1: init 0-60; iterations 1-40 preserved by the saves at 20 and 40 (120 s), 41-50 lost when it
    # died (30 s); two saves of 8 s. Attempt 2: init 300-335 and 347-353 (41 s), load 12 s, iterations
    # 41-60 (60 s) saved at 60, the save 8 s, then 1 s to `after training is done`.
    expected_s = {
        "lifetime": 542,
        "queued": 194,
        "partial": 0,
        "init": 60 + 41,
        "productive": 120 + 60,
        "lost": 30,
        "checkpoint_save": 24,
        "checkpoint_restore": 12,
        "idle": 1,
        "pending": 0,
        "data_wait": 0,
        "compile": 0,
    }
    assert {name: job[f"{name}_chip_s"] / 16 for name in expected_s} == pytest.approx(expected_s)
    # PG from the stated TFLOP/s of the productive blocks (30 s each) against the H100's bf16 peak.
    stated = [400, 400, 410, 410, 395, 395]
    assert job["pg"] == pytest.approx(sum(stated) / len(stated) * 1e12 / 989e12)
    assert job["rg"] == pytest.approx(180 / (542 - 194))


# ---- NeMo 2: a restart inside one log, async saves, times derived from step times ----------
def test_nemo_log_end_to_end_with_derived_times(tmp_path):
    imported, summary = import_to("logs", LOGS / "nemo" / "llama3-8b.log", tmp_path / "in", **NEMO)
    origin = "2025-03-07T22:33:00Z"
    assert summary["rejected"] == {"a malformed iteration line: the nemo pattern does not match it": 1}
    assert [(r["type"], seconds(r["event_time"], origin)) for r in by_job(imported, "scheduler", "llama3-8b")] == [
        ("SUBMIT", 56.0),
        ("ALLOCATE", 56.0),
        ("PREEMPT", 178.0),
        ("ALLOCATE", 250.0),
        ("FINISH", 341.0),
    ]
    steps = blocks(imported, "llama3-8b", origin)
    # No timestamp on `Training epoch` lines: step 0 starts at the last timestamp (22:33:59) and lasts its
    # train_step_timing (11 s); steps 1-9 follow at 7.5 s; step 10 after the async save's blocking part.
    assert steps[:2] == [(0, 0, 0, 59.0, 70.0), (0, 1, 1, 70.0, 77.5)]
    assert steps[10] == (0, 10, 10, 140.0, 147.5) and steps[11] == (0, 11, 11, 148.0, 155.5)
    assert steps[15] == (1, 10, 10, 260.0, 270.0) and steps[-1] == (1, 19, 19, 330.0, 337.5)
    assert sorted((c.caveat, c.detail) for c in imported.caveats) == [
        (
            "asynchronous save: durable at the end of its blocking part, before the log confirms it (optimistic)",
            "step 9, 8.0 s early",
        ),
        (
            "precision not stated in the log: bf16 assumed",
            "PG measured against the h100 bf16 peak, 989 TFLOP/s "
            "per chip; had it trained in fp8 (1,979 TFLOP/s), PG would be 0.5 x as high",
        ),
        (
            "times derived, not stated: placed from the last timestamp by step times and stated durations",
            "25 iteration blocks, 2 checkpoint saves, 1 restores",
        ),
    ]
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["llama3-8b"]
    assert manifest["reconciles"]
    # Attempt 1: init 56-59, steps 0-9 (78.5 s) preserved by the save of step 9 (137.5-140), step 10 and
    # 11-14 lost (37.5 s), 0.5 s idle before the finalize line's timestamp (148). No chips 178-250.
    # Attempt 2: init 250-253 and 255-260, restore 253-255, steps 10-19 (77.5 s) saved at 19
    # (337.5-340), 1 s idle to the finalize line (341).
    expected_s = {
        "lifetime": 285,
        "queued": 72,
        "init": 3 + 8,
        "productive": 78.5 + 77.5,
        "lost": 37.5,
        "checkpoint_save": 5,
        "checkpoint_restore": 2,
        "idle": 1.5,
    }
    assert {name: job[f"{name}_chip_s"] / 8 for name in expected_s} == pytest.approx(expected_s)
    ideal_tflops_s = 300 * 11 + 440 * 67.5 + 330 * 10 + 440 * 67.5
    assert job["pg"] == pytest.approx(ideal_tflops_s / 156 / 989)


# ---- what a log may get wrong ------------------------------------------------------------
NEW_MEGATRON = (  # Megatron-LM since January 2026: microseconds in every timestamp, save lines stamped
    "using world size: 8, data-parallel size: 8, context-parallel size: 1, hierarchical context-parallel sizes: "
    "None, tensor-model-parallel size: 1, pipeline-model-parallel size: 1\n"
    "[after megatron is initialized] datetime: 2026-02-01 10:00:00.000000 \n"
    " [2026-02-01 10:00:20.500000] iteration        5/      20 | consumed samples:           40 | elapsed time "
    "per iteration (ms): 4000.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 9.1E+00 |"
    " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    "[2026-02-01 10:00:21.000000] saving checkpoint at iteration       5 to /ckpt in torch_dist format\n"
    "  [2026-02-01 10:00:23.250000] successfully saved checkpoint from iteration       5 to /ckpt "
    "[ t 1/1, gtp_remat 1/1, p 1/1 ]\n"
)


def write(tmp_path, name: str, text: str):
    folder = tmp_path / "logs"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_a_log_without_throughput_or_end_line_fails_at_its_last_time_with_pg_unknown(tmp_path):
    source = write(tmp_path, "run.log", NEW_MEGATRON)
    imported, summary = import_to(
        "logs", source, tmp_path / "in", profile="megatron", job="j", accelerator="h100", chips=8
    )
    origin = "2026-02-01T10:00:00Z"
    assert blocks(imported, "j", origin) == [(0, 1, 5, 0.5, 20.5)]
    saves = [
        (r["type"], seconds(r["event_time"], origin))
        for r in by_job(imported, "runtime", "j")
        if r["type"].startswith("CHECKPOINT")
    ]
    assert saves == [("CHECKPOINT_SAVE_START", 21.0), ("CHECKPOINT_SAVE_END", 23.25)]
    assert [r["type"] for r in by_job(imported, "scheduler", "j")][-1] == "FAIL"
    assert summary["events"]["profiler"] == 0
    assert {c.caveat for c in imported.caveats} == {
        "PG unknown: the log states no TFLOP/s per GPU",
        "the log stops without its end line: the job is taken as failed at its last time, its unsaved steps lost",
    }


def test_an_fp8_run_is_measured_against_the_fp8_peak(tmp_path):
    stated = NEW_MEGATRON.replace("learning rate:", "throughput per GPU (TFLOP/s/GPU): 900.0 | learning rate:")
    listing = (
        "------------------------ arguments ------------------------\n"
        "  bf16 ............................................ True\n"
        "  fp8 ............................................. hybrid\n"
        "-------------------- end of arguments ---------------------\n"
    )
    imported, _ = import_to(
        "logs",
        write(tmp_path, "run.log", listing + stated),
        tmp_path / "in",
        profile="megatron",
        job="j",
        accelerator="h100",
        chips=8,
    )
    assert [(s["precision"], s["ideal_flops"]) for s in imported.streams["profiler"]] == [("fp8", 900e12 * 4.0 * 8)]
    assert "precision not stated in the log: bf16 assumed" not in {c.caveat for c in imported.caveats}
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    # Iterations 1-5 are saved at 5: 900 TFLOP/s/GPU against 1,979 (H100 fp8 dense), not 989 (bf16).
    assert jobs["j"]["pg"] == pytest.approx(900 / 1979)


def iteration_line(stamp: str, step: int, ms: float = 4000.0) -> str:
    return (
        f" [{stamp}] iteration {step:8d}/{20:8d} | consumed samples: {step * 8:12d} | elapsed time per "
        f"iteration (ms): {ms:.1f} | global batch size:     8 | number of skipped iterations:   0 |\n"
    )


def test_megatron_async_saves_are_durable_only_when_confirmed(tmp_path):
    text = (
        NEW_MEGATRON.split(" [2026")[0]
        + iteration_line("2026-02-01 10:00:20.000000", 5)
        + "[2026-02-01 10:00:20.100000] saving checkpoint at iteration       5 to /ckpt in torch_dist format\n"
        "(min, max) time across ranks (ms):\n    save-checkpoint ................................: (480.00, 500.00)\n"
        + iteration_line("2026-02-01 10:00:40.600000", 10)
        + "  [2026-02-01 10:00:41.000000] successfully saved checkpoint from iteration       5 to /ckpt "
        "[ t 1/1, gtp_remat 1/1, p 1/1 ]\n"
        "[2026-02-01 10:00:41.100000] saving checkpoint at iteration      10 to /ckpt in torch_dist format\n"
        "(min, max) time across ranks (ms):\n    save-checkpoint ................................: (480.00, 500.00)\n"
        + iteration_line("2026-02-01 10:01:01.600000", 15)
    )  # then the job dies before 10 is written
    imported, _ = import_to(
        "logs",
        write(tmp_path, "run.log", text),
        tmp_path / "in",
        profile="megatron",
        job="j",
        accelerator="h100",
        chips=8,
    )
    origin = "2026-02-01T10:00:00Z"
    assert [
        (r["type"], seconds(r["event_time"], origin), r["step"])
        for r in by_job(imported, "runtime", "j")
        if r["type"].startswith("CHECKPOINT")
    ] == [("CHECKPOINT_SAVE_START", 20.1, 5), ("CHECKPOINT_SAVE_END", 20.6, 5)]
    assert {(c.caveat, c.detail) for c in imported.caveats} >= {
        (
            "asynchronous save: durable at the end of its blocking part, before the log confirms it (optimistic)",
            "step 5, 20.4 s early",
        ),
        ("checkpoint save never confirmed in its attempt: not durable, its time is idle", "step 10"),
    }
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    # Iterations 1-5 (20 s) saved; 6-10 and 11-15 (40 s) lost when the log stops; the confirmed save takes
    # 0.5 s; idle: the unconfirmed save's 0.5 s, the 0.1 s before each save line and 40.6 to 41.0 s.
    job = jobs["j"]
    assert [job[f"{name}_chip_s"] / 8 for name in ("productive", "lost", "checkpoint_save", "idle")] == pytest.approx(
        [20.0, 40.0, 0.5, 0.5 + 0.1 + 0.1 + 0.4]
    )


def test_a_log_cut_mid_line_rejects_the_cut_line_and_keeps_the_rest(tmp_path):
    cut = NEW_MEGATRON + " [2026-02-01 10:00:44.000000] iteration       10/      20 | consumed samples:  "
    imported, summary = import_to(
        "logs",
        write(tmp_path, "run.log", cut),
        tmp_path / "in",
        profile="megatron",
        job="j",
        accelerator="h100",
        chips=8,
    )
    assert summary["rejected"] == {"the log ends inside this line (cut short)": 1}
    assert blocks(imported, "j", "2026-02-01T10:00:00Z") == [(0, 1, 5, 0.5, 20.5)]


def test_malformed_and_impossible_iteration_lines_are_rejected_with_their_reason(tmp_path):
    lines = NEW_MEGATRON.splitlines(keepends=True)
    bad = [
        " [2026-02-01 10:00:30.000000] iteration        7/      20 | consumed samples: 56 | elapsed time per "
        "iteration (ms): nan |\n",
        " [2026-02-01 10:00:34.000000] iteration        8/      20 | consumed samples: 64 | elapsed time per "
        "iteration (ms): 0.0 |\n",
        " [2026-02-01 10:00:40.000000] iteration        3/      20 | consumed samples: 24 | elapsed time per "
        "iteration (ms): 4000.0 |\n",
        " [2026-02-01 10:00:44.000000] iteration 99999999999999999999/      20 | consumed samples: 24 | elapsed "
        "time per iteration (ms): 4000.0 |\n",
    ]
    imported, summary = import_to(
        "logs",
        write(tmp_path, "run.log", "".join(lines + bad)),
        tmp_path / "in",
        profile="megatron",
        job="j",
        accelerator="h100",
        chips=8,
    )
    assert summary["rejected"] == {
        "a malformed iteration line: the megatron pattern does not match it": 1,
        "a time or rate that is not a positive number": 1,
        "a step number larger than the contract holds": 1,
        "iteration does not follow the one before and no restart or checkpoint load is logged between them: "
        "its first step is unknown": 1,
    }
    assert len(blocks(imported, "j", "2026-02-01T10:00:00Z")) == 1


def test_a_log_with_no_iteration_line_imports_nothing_and_says_why(tmp_path, capsys):
    source = write(tmp_path, "run.log", NEW_MEGATRON.splitlines(keepends=True)[0])
    with pytest.raises(
        SourceError, match="nothing to import with the nemo profile: run.log: no iteration line of the nemo profile"
    ):
        import_to("logs", source, tmp_path / "in", profile="nemo", job="j", accelerator="h100", chips=8)
    out = tmp_path / "cli"
    assert (
        main(
            [
                "import",
                "logs",
                str(source),
                "--profile",
                "megatron",
                "--job",
                "j",
                "--accelerator",
                "h100",
                "--chips",
                "8",
                "--out",
                str(out),
            ]
        )
        == 1
    )
    assert capsys.readouterr().err.endswith(
        f"mpg import: {source}: nothing to import with the megatron profile: run.log: no iteration line of the "
        f"megatron profile\nmpg import: nothing was written to {out}\n"
    )
    assert not out.exists()


def test_a_log_without_timestamps_is_placed_by_submit(tmp_path):
    text = (
        "Training epoch 0, iteration 0/9 | global_step: 0 | train_step_timing in s: 2 | TFLOPS_per_GPU: 100\n"
        "Training epoch 0, iteration 1/9 | global_step: 1 | train_step_timing in s: 3 | TFLOPS_per_GPU: 100\n"
    )
    source = write(tmp_path, "run.log", text)
    with pytest.raises(SourceError, match="no timestamp: the log cannot be placed in time"):
        import_to("logs", source, tmp_path / "a", profile="nemo", job="j", accelerator="h100", chips=8)
    imported, _ = import_to(
        "logs",
        source,
        tmp_path / "b",
        profile="nemo",
        job="j",
        accelerator="h100",
        chips=8,
        submit_us=parse_time_us("2026-01-01T00:00:00Z"),
    )
    assert blocks(imported, "j", "2026-01-01T00:00:00Z") == [(0, 0, 0, 0.0, 2.0), (0, 1, 1, 2.0, 5.0)]
    submit = by_job(imported, "scheduler", "j")[0]
    assert (submit["type"], submit["workload"], submit["framework"]) == ("SUBMIT", "TRAINING", "nemo")


def test_a_submit_time_after_the_log_starts_is_refused(tmp_path):
    with pytest.raises(SourceError, match="--submit is after the log's first time"):
        import_to(
            "logs",
            write(tmp_path, "run.log", NEW_MEGATRON),
            tmp_path / "in",
            profile="megatron",
            job="j",
            accelerator="h100",
            chips=8,
            submit_us=parse_time_us("2026-02-01T10:00:01Z"),
        )


def test_a_timestamp_behind_the_derived_time_never_moves_time_back(tmp_path):
    # Two steps said to take 6 s each, but the next timestamp is only 5 s after the first.
    text = (
        "[NeMo I 2026-01-01 00:00:00 nemo_logger:145] Experiments will be logged at /r\n"
        "Training epoch 0, iteration 0/9 | global_step: 0 | train_step_timing in s: 6\n"
        "Training epoch 0, iteration 1/9 | global_step: 1 | train_step_timing in s: 6\n"
        "[NeMo I 2026-01-01 00:00:05 model_checkpoint:497] Scheduled async checkpoint save for /r/m--step=1-last.ckpt\n"
        "[NeMo I 2026-01-01 00:00:06 model_checkpoint:522] Async checkpoint save for step 2 (/r/m--step=1-last.ckpt) "
        "finalized successfully.\n"
    )
    imported, _ = import_to(
        "logs", write(tmp_path, "run.log", text), tmp_path / "in", profile="nemo", job="j", accelerator="h100", chips=8
    )
    origin = "2026-01-01T00:00:00Z"
    assert blocks(imported, "j", origin) == [(0, 0, 0, 0.0, 6.0), (0, 1, 1, 6.0, 12.0)]
    # The save began where step 1 ended (12 s) and cannot end before it: zero length, durable at 12 s.
    assert [
        (r["type"], seconds(r["event_time"], origin))
        for r in by_job(imported, "runtime", "j")
        if r["type"].startswith("CHECKPOINT")
    ] == [("CHECKPOINT_SAVE_START", 12.0), ("CHECKPOINT_SAVE_END", 12.0)]
    assert ("times derived from step times ran ahead of the log's timestamps", "by up to 7.0 s") in {
        (c.caveat, c.detail) for c in imported.caveats
    }


def test_a_user_profile_adds_a_framework(tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "nanogpt:\n"
        "  description: nanoGPT train.py with a timestamp prefix\n"
        "  timestamp: '^(?P<time>\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d)'\n"
        "  time_format: '%Y-%m-%dT%H:%M:%S'\n"
        "  iteration: 'iter (?P<step>\\d+): loss [0-9.]+, time (?P<ms>[0-9.]+)ms'\n"
        "  first_step: 0\n"
        "  end: 'training done'\n",
        encoding="utf-8",
    )
    source = write(
        tmp_path,
        "train.out",
        "2026-01-01T00:00:00 compiling the model... (takes a ~minute)\n"
        "2026-01-01T00:00:01 iter 0: loss 4.1, time 500.00ms\n"
        "2026-01-01T00:00:02 iter 1: loss 3.9, time 500.00ms\n"
        "2026-01-01T00:00:02 training done\n",
    )
    imported, summary = import_to(
        "logs", source, tmp_path / "in", profile="nanogpt", profiles=profiles, job="j", accelerator="a100", chips=1
    )
    assert summary["rejected"] == {}
    assert blocks(imported, "j", "2026-01-01T00:00:00Z") == [(0, 0, 0, 0.5, 1.0), (0, 1, 1, 1.5, 2.0)]
    assert [r["type"] for r in by_job(imported, "scheduler", "j")] == ["SUBMIT", "ALLOCATE", "FINISH"]


@pytest.mark.parametrize(
    "body, message",
    [
        ("x:\n  timestamp: '(?P<time>.*)'\n", "profile 'x' has no iteration pattern"),
        ("x:\n  timestamp: '(?P<time>.*)'\n  iteration: 'it (\\d+)'\n", "iteration needs the named group"),
        ("x:\n  timestamp: '(?P<time>.*)'\n  iteration: '(?P<step>\\d+) (?P<ms>\\d+)'\n  speed: 'x'\n", "unknown keys"),
        (
            "x:\n  timestamp: '(?P<time>['\n  iteration: '(?P<step>\\d+) (?P<ms>\\d+)'\n",
            "timestamp is not a valid regular",
        ),
        # Read as every settings file is (config.read_yaml): nested aliases are counted before anything is built.
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join([f'*{chr(97 + n)}'] * 10)}]\n" for n in range(5)),
            "more than 100,000 values",
        ),
    ],
)
def test_a_broken_profile_is_refused_naming_the_key(tmp_path, body, message):
    """A profiles file is an argument: what is wrong with it is a bad argument (exit 2), naming the flag."""
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(body, encoding="utf-8")
    source = write(tmp_path, "run.log", NEW_MEGATRON)
    with pytest.raises(UsageError, match=f"^--profiles {profiles}: .*{message}"):
        import_to("logs", source, tmp_path / "in", profile="x", profiles=profiles, job="j", accelerator="h100", chips=8)


def test_several_ranks_logs_of_one_job_are_not_counted_twice(tmp_path):
    source = write(tmp_path, "rank0.log", NEW_MEGATRON)
    write(tmp_path, "rank7.log", NEW_MEGATRON)
    imported, summary = import_to(
        "logs", source, tmp_path / "in", profile="megatron", job="j", accelerator="h100", chips=8
    )
    assert list(summary["rejected"]) == [
        "overlaps the log before it in time: several ranks' logs, or a copy? give "
        "the log of one rank (Megatron prints iterations on the last rank)"
    ]
    assert len(blocks(imported, "j", "2026-02-01T10:00:00Z")) == 1
    assert rejected_rows(tmp_path / "in")[0]["file"] == "rank7.log"


def test_what_the_log_cannot_say_must_be_given(tmp_path, capsys):
    source = write(tmp_path, "run.log", NEW_MEGATRON)
    with pytest.raises(UsageError, match=r"pass --profile NAME \(megatron, nemo, nemo1, or one of --profiles FILE\)$"):
        import_to("logs", source, tmp_path / "a", accelerator="h100", chips=8)
    with pytest.raises(UsageError, match=r"no log profile 'deepspeed' \(known: megatron, nemo, nemo1\)"):
        import_to("logs", source, tmp_path / "b", profile="deepspeed", job="j", accelerator="h100", chips=8)
    # Megatron prints its world size, but neither a job name (no --wandb-exp-name) nor its GPUs.
    with pytest.raises(
        UsageError, match="the log does not say its job, nor its accelerator: pass --job ID --accelerator KEY$"
    ):
        import_to("logs", source, tmp_path / "c", profile="megatron")
    out = tmp_path / "cli"
    assert main(["import", "logs", str(source), "--profile", "megatron", "--out", str(out)]) == 2
    assert capsys.readouterr().err.endswith(
        f"mpg import: {source}: the log does not say its job, nor its accelerator: pass --job ID --accelerator KEY\n"
    )
    assert not out.exists()


# ---- what the log says of its job, device and world size (issue 35) ----------------------------------
MEGATRON_64 = NEW_MEGATRON.replace(
    "using world size: 8, data-parallel size: 8", "using world size: 64, data-parallel size: 64"
).replace("learning rate:", "throughput per GPU (TFLOP/s/GPU): 400.0 | learning rate:")


def test_a_log_without_flags_reads_its_world_size_and_job(tmp_path):
    listing = (
        "------------------------ arguments ------------------------\n"
        "  wandb_exp_name .................................. gpt-70b-pretrain\n"
        "  world_size ...................................... 64\n"
        "-------------------- end of arguments ---------------------\n"
    )
    imported, _ = import_to(
        "logs",
        write(tmp_path, "run.log", listing + MEGATRON_64),
        tmp_path / "in",
        profile="megatron",
        accelerator="h100",
    )
    assert {(r["job_id"], r["chips"]) for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"} == {
        ("gpt-70b-pretrain", 64)
    }
    provenance = json.loads((tmp_path / "in" / "SOURCE.json").read_text())
    assert provenance["read_from"] == {
        "job": "run.log line 2",
        "chips": "run.log line 5",
        "accelerator": "--accelerator",
    }
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["gpt-70b-pretrain"]
    # 0-0.5 s init, iterations 1-5 (20 s) saved at 21-23.25 s, 0.5 s idle before it; all on 64 GPUs.
    assert [
        job[f"{name}_chip_s"] for name in ("lifetime", "init", "productive", "checkpoint_save", "idle")
    ] == pytest.approx([64 * 23.25, 64 * 0.5, 64 * 20, 64 * 2.25, 64 * 0.5])
    assert job["pg"] == pytest.approx(400 / 989)


def test_fewer_chips_than_the_logs_world_size_are_refused(tmp_path, capsys):
    source = write(tmp_path, "run.log", MEGATRON_64)
    with pytest.raises(
        UsageError,
        match=r"--chips 16 is fewer than the world size the log prints \(64, run.log "
        r"line 1\)",
    ):
        import_to("logs", source, tmp_path / "a", profile="megatron", job="j", accelerator="h100", chips=16)
    assert (
        main(
            [
                "import",
                "logs",
                str(source),
                "--profile",
                "megatron",
                "--job",
                "j",
                "--accelerator",
                "h100",
                "--chips",
                "16",
                "--out",
                str(tmp_path / "cli"),
            ]
        )
        == 2
    )
    assert "--chips 16 is fewer than the world size the log prints" in capsys.readouterr().err


def test_more_chips_than_the_world_size_hold_the_rest_idle_with_a_caveat(tmp_path):
    imported, _ = import_to(
        "logs",
        write(tmp_path, "run.log", MEGATRON_64),
        tmp_path / "in",
        profile="megatron",
        job="j",
        accelerator="h100",
        chips=72,
    )
    assert (
        "--chips is more than the log's world size: the chips it does not train on count as held, none of "
        "their time productive",
        "--chips 72, world size 64 (run.log line 1)",
    ) in {(c.caveat, c.detail) for c in imported.caveats}
    [sample] = imported.streams["profiler"]
    assert (sample["chips"], sample["ideal_flops"]) == (72, 400e12 * 4.0 * 64)  # the FLOPs of the 64 that train
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert jobs["j"]["lifetime_chip_s"] == pytest.approx(72 * 23.25)
    assert jobs["j"]["pg"] == pytest.approx(400 * 64 / (989 * 72))


NEMO_LIGHTNING = (
    "[NeMo I 2026-01-01 00:00:00 nemo_logger:145] Experiments will be logged at /r\n"
    "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8\n"
    "You are using a CUDA device ('NVIDIA H100 80GB HBM3') that has Tensor Cores. To properly utilize them, you "
    "should set `torch.set_float32_matmul_precision('medium' | 'high')` which will trade-off precision for "
    "performance. For more details, read https://pytorch.org/docs/stable/generated/"
    "torch.set_float32_matmul_precision.html#torch.set_float32_matmul_precision\n"
    "Training epoch 0, iteration 0/9 | global_step: 0 | train_step_timing in s: 2\n"
    "Training epoch 0, iteration 1/9 | global_step: 1 | train_step_timing in s: 3\n"
    "[NeMo I 2026-01-01 00:00:06 nemo_logger:145] `Trainer.fit` stopped: `max_steps=2` reached.\n"
)


def test_lightning_names_the_device_and_world_size_and_a_flag_overrides_them(tmp_path):
    source = write(tmp_path, "run.log", NEMO_LIGHTNING)
    imported, _ = import_to("logs", source, tmp_path / "a", profile="nemo", job="j")
    submit = by_job(imported, "scheduler", "j")[0]
    assert (submit["accelerator"], submit["chips"]) == ("h100", 8)
    imported, _ = import_to("logs", source, tmp_path / "b", profile="nemo", job="j", accelerator="a100")
    assert by_job(imported, "scheduler", "j")[0]["accelerator"] == "a100"
    assert (
        "--accelerator differs from the device the log names: the flag's key is used",
        "--accelerator a100; the log: 'NVIDIA H100 80GB HBM3' (h100)",
    ) in {(c.caveat, c.detail) for c in imported.caveats}
    unknown = NEMO_LIGHTNING.replace("NVIDIA H100 80GB HBM3", "NVIDIA Z9000")
    with pytest.raises(
        UsageError,
        match=r"the log does not say a device of the catalogue \(it names "
        r"'NVIDIA Z9000'\): pass --accelerator KEY$",
    ):
        import_to("logs", write(tmp_path, "z.log", unknown) / "z.log", tmp_path / "c", profile="nemo", job="j")


def test_a_restart_that_redoes_saved_iterations_counts_them_lost(tmp_path):
    # The first launch saves iteration 5 and dies; the second does not load it and redoes iterations 1-5.
    write(
        tmp_path,
        "run-b.log",
        NEW_MEGATRON.replace("10:00:", "10:01:") + "[after training is done] datetime: 2026-02-01 10:01:24.000000 \n",
    )
    source = write(tmp_path, "run-a.log", NEW_MEGATRON)
    imported, _ = import_to("logs", source, tmp_path / "in", profile="megatron", job="j", accelerator="h100", chips=8)
    origin = "2026-02-01T10:00:00Z"
    assert blocks(imported, "j", origin) == [(0, 1, 5, 0.5, 20.5), (1, 1, 5, 60.5, 80.5)]
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["j"]
    # Launch a: 0-0.5 init, iterations 1-5 (20 s) saved at 5 (21-23.25), 0.5 s idle before the save line.
    # 23.25-60: no launch (queued). Launch b: 60-60.5 init, iterations 1-5 again (20 s): steps already
    # preserved, so lost; its save (2.25 s), 0.5 s idle before it and 0.75 s to the end line (84).
    expected_s = {
        "lifetime": 84,
        "queued": 36.75,
        "init": 1.0,
        "productive": 20,
        "lost": 20,
        "checkpoint_save": 4.5,
        "idle": 0.5 + 0.5 + 0.75,
    }
    assert {name: job[f"{name}_chip_s"] / 8 for name in expected_s} == pytest.approx(expected_s)
    assert job["status"] == "FINISHED"


# ---- a save is durable only once confirmed, and never before the step it follows (issue 35) ----------
def test_megatron_without_save_timer_lines_ends_each_save_where_training_resumed(tmp_path):
    """The fixture with its `save-checkpoint` timer lines grepped out (stripped logs, other launchers):
    the saves have no stated duration and no timestamp, so each ends where the loop resumed."""
    source = tmp_path / "stripped"
    source.mkdir()
    for path in (LOGS / "megatron").iterdir():
        lines = path.read_text().splitlines(keepends=True)
        (source / path.name).write_text("".join(line for line in lines if "save-checkpoint" not in line))
    imported, _ = import_to(
        "logs", source, tmp_path / "in", submit_us=parse_time_us("2025-06-10T07:58:00Z"), **MEGATRON
    )
    origin = "2025-06-10T08:00:00Z"
    # Saves from the end of the block they follow to the start of the next (derived from its timestamp less
    # 10 x 3 s: 08:02:38 - 30 s = 128 s); the last to the end line (08:07:02 = 422 s).
    spans = [
        (r["type"], seconds(r["event_time"], origin))
        for r in by_job(imported, "runtime", "gpt-8b")
        if r["type"].startswith("CHECKPOINT_SAVE")
    ]
    assert spans == [
        ("CHECKPOINT_SAVE_START", 120.0),
        ("CHECKPOINT_SAVE_END", 128.0),
        ("CHECKPOINT_SAVE_START", 188.0),
        ("CHECKPOINT_SAVE_END", 196.0),
        ("CHECKPOINT_SAVE_START", 413.0),
        ("CHECKPOINT_SAVE_END", 422.0),
    ]
    assumed = (
        "checkpoint save of no stated duration (no timer line, no timestamp at its end): taken to last "
        "until the log's next time"
    )
    assert sorted(c.detail for c in imported.caveats if c.caveat == assumed) == [
        "step 20: until the training loop resumed, 8.0 s",
        "step 40: until the training loop resumed, 8.0 s",
        "step 60: until the attempt's last time, 9.0 s",
    ]
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["gpt-8b"]
    assert manifest["reconciles"]
    # As with the timer lines (test above), but the saves take 8 + 8 + 9 s and nothing is idle.
    expected_s = {
        "lifetime": 542,
        "queued": 194,
        "init": 101,
        "productive": 180,
        "lost": 30,
        "checkpoint_save": 25,
        "checkpoint_restore": 12,
        "idle": 0,
    }
    assert {name: job[f"{name}_chip_s"] / 16 for name in expected_s} == pytest.approx(expected_s)


def megatron_iteration(stamp: str, step: int, ms: float) -> str:
    return (
        f" [{stamp}] iteration {step:8d}/     200 | consumed samples: {step * 256:12d} | elapsed time per "
        f"iteration (ms): {ms:.1f} | learning rate: 1.000000E-04 | global batch size:   256 | lm loss: "
        "6.000000E+00 | loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )


def test_a_crash_after_unstamped_saves_loses_only_the_steps_after_the_last_one(tmp_path):
    """Issue 35's case: twelve blocks of 10 iterations of 15 s, a save every 20 iterations up to 100 with
    neither timer nor timestamp (each took 8 s), then the job dies after iteration 120. Once, the saves
    were placed, zero-length, before the end of the block they follow and made nothing durable."""
    lines = [
        "using world size: 16, data-parallel size: 2, context-parallel size: 1, hierarchical "
        "context-parallel sizes: None, tensor-model-parallel size: 4, pipeline-model-parallel size: 2\n",
        "time to initialize megatron (seconds): 47.000\n",
        "[after megatron is initialized] datetime: 2025-06-10 08:00:00 \n",
    ]
    elapsed = 100  # s after 08:00:00: the first block starts here
    for step in range(10, 121, 10):
        elapsed += 150
        lines.append(
            megatron_iteration(
                f"2025-06-10 {8 + elapsed // 3600:02d}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}", step, 15000.0
            )
        )
        if step % 20 == 0 and step <= 100:
            lines += [
                f"saving checkpoint at iteration {step:8d} to /ckpt in torch_dist format\n",
                f"  successfully saved checkpoint from iteration {step:8d} to /ckpt [ t 1/4, p 1/2 ]\n",
            ]
            elapsed += 8
    imported, _ = import_to("logs", write(tmp_path, "run.log", "".join(lines)), tmp_path / "in", **MEGATRON)
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["gpt-8b"]
    # init 47 s before 08:00:00 and 100 s after; 12 blocks of 150 s; five saves of 8 s: 1,987 s.
    # Iterations 1-100 (10 blocks) saved: 1,500 s productive; 101-120 lost when the log stops: 300 s.
    expected_s = {
        "lifetime": 1987,
        "queued": 0,
        "init": 147,
        "productive": 1500,
        "lost": 300,
        "checkpoint_save": 40,
        "idle": 0,
    }
    assert {name: job[f"{name}_chip_s"] / 16 for name in expected_s} == pytest.approx(expected_s)
    assert job["rg"] == pytest.approx(1500 / 1987) and round(job["rg"], 3) == 0.755


def test_the_files_of_a_jobs_launches_are_several_sources(tmp_path, capsys):
    """`mpg import logs run1.log run2.log`: the same job as their folder, in time order whatever the order given."""
    files = [str(LOGS / "megatron" / name) for name in ("gpt8b.node03.out", "gpt8b.node07.out")]
    flags = ["--profile", "megatron", "--job", "gpt-8b", "--accelerator", "h100"]
    assert main(["import", "logs", *files, *flags, "--out", str(tmp_path / "files")]) == 0
    assert main(["import", "logs", str(LOGS / "megatron"), *flags, "--out", str(tmp_path / "folder")]) == 0
    assert tree_bytes(tmp_path / "files") == tree_bytes(tmp_path / "folder")
    # A file given twice (itself and in its folder) is read once.
    assert main(["import", "logs", files[0], str(LOGS / "megatron"), *flags, "--out", str(tmp_path / "both")]) == 0
    assert tree_bytes(tmp_path / "both") == tree_bytes(tmp_path / "folder")
