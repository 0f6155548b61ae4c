"""`mpg import logs` on real public training-log excerpts (issue 35, "Formats"): each file in
tests/data/public (source and licence in its README) read to figures computed here by hand
from the excerpt's own lines."""

from __future__ import annotations

import pytest

from fleet_goodput.core.timeutil import parse_time_us
from test_importers_common import PUBLIC_DATA, by_job, import_to, run_and_read

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
    imported, summary = import_to("logs", MEGATRON_DEEPSPEED, tmp_path / "in", profile="megatron", job="alcf",
                                  accelerator="a100", chips=8)
    origin = "2024-03-07T15:27:00Z"
    assert summary["rejected"] == {}
    # Iteration 199 is where the excerpt resumed, not iterations 1-199 of work (199 x 14.3 s = 47 min before
    # the excerpt's first line). Iteration 200 has no timestamp of its own: it follows the last one (17.188 s).
    assert caveats(imported)["the log starts mid-run (no start line before its first iteration line): that "
                             "iteration is where it resumed; the steps before it are not counted"] == "iteration 199"
    runtime = [(r["type"], seconds(r["event_time"], origin), r["step"]) for r in by_job(imported, "runtime", "alcf")]
    assert runtime == [("STEP_START", 17.188, 200), ("STEP_END", 17.188 + 14.5414, 200)]
    scheduler = [(r["type"], seconds(r["event_time"], origin)) for r in by_job(imported, "scheduler", "alcf")]
    assert scheduler == [("SUBMIT", 2.646), ("ALLOCATE", 2.646), ("FAIL", 17.188 + 14.5414)]
    # `TFLOPs: 68.63` is per GPU (Megatron-DeepSpeed divides by the world size): one ANALYTIC sample.
    [sample] = imported.streams["profiler"]
    assert (sample["flops_source"], sample["step"], sample["chips"], sample["duration_s"]) == (
        "ANALYTIC", 200, 8, pytest.approx(14.5414))
    assert sample["ideal_flops"] == pytest.approx(68.63e12 * 14.5414 * 8)
    assert caveats(imported)["checkpoint save never confirmed in its attempt: not durable, its time is idle"] == \
        "step 200"
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs["alcf"]
    assert manifest["reconciles"] and job["status"] == "FAILED"
    # 2.646 s to 31.7294 s on 8 GPUs: no init in the excerpt; 2.646-17.188 idle (the log shows no work it
    # can place there); iteration 200 lost (its save never confirmed before the crash).
    expected_s = {"lifetime": 29.0834, "init": 0, "idle": 14.542, "lost": 14.5414, "productive": 0,
                  "checkpoint_save": 0}
    assert {name: job[f"{name}_chip_s"] / 8 for name in expected_s} == pytest.approx(expected_s)
