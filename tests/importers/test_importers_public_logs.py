"""`mpg import logs` on real public training-log excerpts (issue 35, "Formats"): each file in
tests/data/public (source and licence in its README) read to figures computed here by hand
from the excerpt's own lines."""

from __future__ import annotations

import pytest

from fleet_goodput.core.timeutil import parse_time_us
from importing import PUBLIC_DATA, by_job, import_to, run_and_read

MEGATRON_DEEPSPEED = PUBLIC_DATA / "megatron-deepspeed" / "alcf-polaris-iterations-199-200.log"


def seconds(time_us: int, origin: str) -> float:
    return (time_us - parse_time_us(origin)) / 1e6


def caveats(imported) -> dict[str, str]:
    return {c.caveat: c.detail for c in imported.caveats}


# ---- Megatron-DeepSpeed: TFLOPs, DeepSpeed's timestamps, a log that starts mid-run ------------------------
def test_megatron_deepspeed_excerpt_resumes_at_its_first_iteration_and_reads_tflops(tmp_path):
    """Six lines of a Megatron-DeepSpeed run on ALCF Polaris (argonne-lcf/Megatron-DeepSpeed, ALCF/README.md):
    DeepSpeed's timer line at 15:27:02,646, iteration 199 (14287.5 ms, TFLOPs 69.85), DeepSpeed's lines at
    15:27:15,063 and 15:27:17,188, iteration 200 (14541.4 ms, TFLOPs 68.63), `saving checkpoint at iteration
    200`, then the crash the README shows. The run's GPUs are not in the excerpt: --chips 8 --accelerator a100."""
    imported, summary = import_to(
        "logs", MEGATRON_DEEPSPEED, tmp_path / "in", profile="megatron", job="alcf", accelerator="a100", chips=8
    )
    origin = "2024-03-07T15:27:00Z"
    assert summary["rejected"] == {}
    # Iteration 199 is where the excerpt resumed, not iterations 1-199 of work (199 x 14.3 s = 47 min before
    # the excerpt's first line). Iteration 200 has no timestamp of its own: it follows the last one (17.188 s).
    assert (
        caveats(imported)[
            "the log starts mid-run (no start line before its first iteration line): that "
            "iteration is where it resumed; the steps before it are not counted"
        ]
        == "iteration 199"
    )
    runtime = [(r["type"], seconds(r["event_time"], origin), r["step"]) for r in by_job(imported, "runtime", "alcf")]
    assert runtime == [("STEP_START", 17.188, 200), ("STEP_END", 17.188 + 14.5414, 200)]
    scheduler = [(r["type"], seconds(r["event_time"], origin)) for r in by_job(imported, "scheduler", "alcf")]
    assert scheduler == [("SUBMIT", 2.646), ("ALLOCATE", 2.646), ("FAIL", 17.188 + 14.5414)]
    # `TFLOPs: 68.63` is per GPU (Megatron-DeepSpeed divides by the world size): one ANALYTIC sample.
    [sample] = imported.streams["profiler"]
    assert (sample["flops_source"], sample["step"], sample["chips"], sample["duration_s"]) == (
        "ANALYTIC",
        200,
        8,
        pytest.approx(14.5414),
    )
    assert sample["ideal_flops"] == pytest.approx(68.63e12 * 14.5414 * 8)
    assert (
        caveats(imported)["checkpoint save never confirmed in its attempt: not durable, its time is idle"] == "step 200"
    )
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["alcf"]
    assert manifest["reconciles"] and job["status"] == "FAILED"
    # 2.646 s to 31.7294 s on 8 GPUs: no init in the excerpt; 2.646-17.188 idle (the log shows no work it
    # can place there); iteration 200 lost (its save never confirmed before the crash).
    expected_s = {
        "lifetime": 29.0834,
        "init": 0,
        "idle": 14.542,
        "lost": 14.5414,
        "productive": 0,
        "checkpoint_save": 0,
    }
    assert {name: job[f"{name}_chip_s"] / 8 for name in expected_s} == pytest.approx(expected_s)


# ---- NeMo 2: the synchronous save line ----------------------------------------------------------------
NEMO_SAVE = PUBLIC_DATA / "nemo" / "dgxc-nemotron4-15b-checkpoint-save.log"


def nemo_log_around_the_save(tail: str = "`Trainer.fit` stopped: `max_steps=51` reached.\n") -> str:
    """NeMo 2 lines written by hand (its logger prefix, its progress printer's `Training epoch` lines:
    steps 0-50 of 0.75 s from 14:48:00), then the real save line of NVIDIA's Nemotron4 15B recipe
    (dgxc-benchmarking, MIT): `[NeMo I 2025-04-11 14:48:45 …] Global Checkpoint Save : Rank: 0 :
    Iteration: 50 : Start time: 1744408121.151s : Save duration: 4.389s`."""
    steps = "".join(
        f"Training epoch 0, iteration {n}/50 | lr: 3e-05 | global_batch_size: 256 | global_step: {n} | "
        f"reduced_train_loss: 9.5 | train_step_timing in s: 0.75 | consumed_samples: {256 * (n + 1)}\n"
        for n in range(51)
    )
    return (
        "[NeMo I 2025-04-11 14:48:00 nemo_logger:145] Experiments will be logged at /results/nemotron4-15b\n"
        + steps
        + NEMO_SAVE.read_text()
        + tail
    )


def test_nemo_synchronous_save_line_is_a_durable_save_of_its_duration(tmp_path):
    (tmp_path / "run.log").write_text(nemo_log_around_the_save())
    imported, summary = import_to(
        "logs", tmp_path / "run.log", tmp_path / "in", profile="nemo", job="n4", accelerator="h100", chips=16
    )
    origin = "2025-04-11T14:48:00Z"
    assert summary["rejected"] == {}
    saves = [
        (r["type"], seconds(r["event_time"], origin), r["step"])
        for r in by_job(imported, "runtime", "n4")
        if r["type"].startswith("CHECKPOINT")
    ]
    # Ends at its line's prefix (14:48:45), having lasted its Save duration: from 40.611 s.
    assert saves == [("CHECKPOINT_SAVE_START", 45 - 4.389, 50), ("CHECKPOINT_SAVE_END", 45.0, 50)]
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["n4"]
    assert manifest["reconciles"] and job["status"] == "FINISHED"
    # Steps 0-50: 51 x 0.75 = 38.25 s, saved at 50; the save 4.389 s; 38.25 to 40.611 s idle; FINISH at 45 s.
    expected_s = {
        "lifetime": 45,
        "init": 0,
        "productive": 38.25,
        "lost": 0,
        "checkpoint_save": 4.389,
        "idle": 40.611 - 38.25,
    }
    assert {name: job[f"{name}_chip_s"] / 16 for name in expected_s} == pytest.approx(expected_s)


def test_nemo_save_line_followed_by_an_async_schedule_is_durable_only_once_finalized(tmp_path):
    """The same line, then NeMo's `Scheduled async checkpoint save` for step 50 at 14:48:46 and no
    finalize: the line was the blocking part of an asynchronous save the job never finished."""
    tail = (
        "[NeMo I 2025-04-11 14:48:46 model_checkpoint:497] Scheduled async checkpoint save for "
        "/results/nemotron4-15b/checkpoints/model--step=50-last.ckpt\n"
    )
    (tmp_path / "run.log").write_text(nemo_log_around_the_save(tail))
    imported, _ = import_to(
        "logs", tmp_path / "run.log", tmp_path / "in", profile="nemo", job="n4", accelerator="h100", chips=16
    )
    assert (
        caveats(imported)["checkpoint save never confirmed in its attempt: not durable, its time is idle"] == "step 50"
    )
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["n4"]
    # FAIL at 46 s: steps 0-50 lost; the unconfirmed save's 4.389 s, the 2.361 s before it and 1 s after: idle.
    expected_s = {"lifetime": 46, "productive": 0, "lost": 38.25, "checkpoint_save": 0, "idle": 2.361 + 4.389 + 1}
    assert {name: job[f"{name}_chip_s"] / 16 for name in expected_s} == pytest.approx(expected_s)


# ---- NeMo 1 / PyTorch Lightning: the progress bar ------------------------------------------------------------
NEMO1_BAR = PUBLIC_DATA / "nemo" / "dgxc-grok1-314b-progress-bar.log"
SUBMIT = "2025-05-01T00:00:00Z"


def test_nemo1_progress_bar_reads_its_steps_over_its_elapsed_time(tmp_path):
    """NVIDIA's Grok-1 314B recipe (dgxc-benchmarking, MIT) quotes its run's last bar: `Epoch 0: : 100%|██████████|
    50/50 [23:22<00:00, reduced_train_loss=0.186, global_step=49.00, consumed_samples=51200.0, train_step_timing in
    s=24.00]`. 50 steps in 23 min 22 s (1,402 s: 28.04 s a step on average, the last one 24 s). No timestamp:
    --submit places it; the recipe's GPUs are not in the line: --chips 128 --accelerator h100."""
    flags = dict(profile="nemo1", job="grok", accelerator="h100", chips=128, submit_us=parse_time_us(SUBMIT))
    imported, summary = import_to("logs", NEMO1_BAR, tmp_path / "a", **flags)
    assert summary["rejected"] == {}
    steps = [(r["type"], seconds(r["event_time"], SUBMIT), r["step"]) for r in by_job(imported, "runtime", "grok")]
    assert steps == [("STEP_START", 0.0, 1), ("STEP_END", 23 * 60 + 22.0, 50)]
    _, jobs = run_and_read(tmp_path / "a", tmp_path / "a-out")
    # The line alone: no end line, so the job is taken as failed there and its 50 unsaved steps lost.
    assert [jobs["grok"][f"{name}_chip_s"] / 128 for name in ("lifetime", "lost", "productive")] == pytest.approx(
        [1402, 1402, 0]
    )

    # With Lightning's end line after it (written here), the run finished: its steps are progress.
    (tmp_path / "finished.log").write_text(NEMO1_BAR.read_text() + "`Trainer.fit` stopped: `max_steps=50` reached.\n")
    import_to("logs", tmp_path / "finished.log", tmp_path / "b", **flags)
    _, jobs = run_and_read(tmp_path / "b", tmp_path / "b-out")
    assert jobs["grok"]["status"] == "FINISHED"
    assert [jobs["grok"][f"{name}_chip_s"] / 128 for name in ("lifetime", "productive", "lost")] == pytest.approx(
        [1402, 1402, 0]
    )


def test_a_progress_bar_redrawn_over_two_epochs(tmp_path):
    """As tqdm writes it to a file (written here in Lightning's format): each redraw after a carriage
    return, refreshes that repeat a count, and a second epoch counting from 1 again."""
    bar = "\r".join(
        [
            "Epoch 0:   0%|          | 0/4 [00:00<?, ?it/s]",
            "Epoch 0:  25%|██▌       | 1/4 [00:10<00:30,  0.10it/s]",
            "Epoch 0:  25%|██▌       | 1/4 [00:10<00:30,  0.10it/s, loss=8.03, v_num=0]",
            "Epoch 0: 100%|██████████| 4/4 [00:40<00:00,  0.10it/s, loss=7.5, v_num=0]",
            "Epoch 1:  50%|█████     | 2/4 [00:25<00:25,  0.08it/s, loss=7.1, v_num=0]",
            "Epoch 1: 100%|██████████| 4/4 [00:50<00:00,  0.08it/s, loss=6.9, v_num=0]",
        ]
    )
    (tmp_path / "run.log").write_text(
        "[NeMo I 2025-05-01 00:00:00 exp_manager:396] Experiments will be logged at "
        f"/r\n{bar}\n`Trainer.fit` stopped: `max_epochs=2` reached.\n"
    )
    imported, summary = import_to(
        "logs", tmp_path / "run.log", tmp_path / "in", profile="nemo1", job="j", accelerator="a100", chips=1
    )
    assert summary["rejected"] == {}
    runtime = [(seconds(r["event_time"], SUBMIT), r["step"]) for r in by_job(imported, "runtime", "j")]
    # Epoch 0 from 00:00:00: step 1 over 0-10 s, steps 2-4 over 10-40 s. Epoch 1 begins at 40 s: its steps
    # 1-2 are the job's 5-6 (40-65 s), 3-4 its 7-8 (65-90 s).
    assert runtime == [(0, 1), (10, 1), (10, 2), (40, 4), (40, 5), (65, 6), (65, 7), (90, 8)]
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert [jobs["j"][f"{name}_chip_s"] for name in ("lifetime", "productive", "idle")] == pytest.approx([90, 90, 0])
