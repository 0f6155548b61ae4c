"""`mlperf`, `kineto` and `mgm` importers: real MLPerf logs and Kineto traces, the hand-written mgm fixture."""

from __future__ import annotations

import pytest

from importing import FIXTURES, PUBLIC_DATA, by_job, import_to, rejected_rows, run_and_read

MLPERF, KINETO = PUBLIC_DATA / "mlperf", PUBLIC_DATA / "kineto"
MI300X_RUN = "AMD__MI300X_EPYC_9575F_pytorch_llama2_70b__llama2_70b_lora__result_0"
LLAMA_405B_RUN = "NVIDIA__hsg_ngpu2560_ngc25.09_nemo__llama31_405b__result_0"
# The V100 trace names its job (Meta's scheduler writes mast_job_name and mast_job_attempt into every rank's trace).
V100_JOB = "torchx-pytorch_resnet_integration_test-bq9m2dtfhskc6c.attempt-0"


# ---- mlperf ---------------------------------------------------------------
@pytest.fixture(scope="module")
def mlperf_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlperf")
    imported, summary = import_to("mlperf", MLPERF, root / "in")
    manifest, jobs = run_and_read(root / "in", root / "out")
    return imported, summary, manifest, jobs


def test_mlperf_every_run_is_a_job_and_the_run_reconciles(mlperf_run):
    imported, summary, manifest, jobs = mlperf_run
    assert summary["jobs"] == len(list((MLPERF / "results").glob("*.txt"))) == 17
    assert summary["rejected"] == {}
    assert manifest["reconciles"] and all(c["rejected"] == 0 for c in manifest["streams"].values())
    assert {job["status"] for job in jobs.values()} == {"FINISHED"}  # every sample run logs status success
    # Profiler samples only for the Llama 3.1 pretraining runs, whose FLOPs follow from the log.
    assert {r["job_id"].split("__")[2] for r in imported.streams["profiler"]} == {"llama31_8b", "llama31_405b"}


def test_mlperf_mi300x_run_matches_its_log(mlperf_run):
    imported, _, _, jobs = mlperf_run
    scheduler = [
        (r["type"], r["event_time"], r["chips"], r["accelerator"]) for r in by_job(imported, "scheduler", MI300X_RUN)
    ]
    assert scheduler == [
        ("SUBMIT", 1755476345692000, 8, "mi300x"),
        ("ALLOCATE", 1755476345692000, 8, "mi300x"),
        ("FINISH", 1755479401425000, 0, "mi300x"),
    ]
    runtime = by_job(imported, "runtime", MI300X_RUN)
    assert (runtime[0]["type"], runtime[0]["event_time"], runtime[1]["type"], runtime[1]["event_time"]) == (
        "INIT_START",
        1755476345692000,
        "INIT_END",
        1755477365577000,
    )
    steps = [(r["event_time"], r["step"]) for r in runtime if r["type"].startswith("STEP")]
    # First block: block_start at run_start with samples_count 0, block_stop at curr_global_step 192 (gbs 8).
    assert steps[:2] == [(1755477365577000, 1), (1755478097187000, 192)]
    assert len(steps) == 2 * 7  # seven blocks, each ending where an evaluation starts
    job = jobs[MI300X_RUN]
    assert job["init_chip_s"] == pytest.approx(8 * 1019.885)
    # Seven evaluations (214.994 s in all, from the eval_start/eval_stop pairs) have no category: idle,
    # as are the few ms between a block_stop and the next eval_start or run_stop.
    assert job["idle_chip_s"] == pytest.approx(8 * 215.000, abs=8 * 0.001)
    assert job["productive_chip_s"] + job["idle_chip_s"] + job["init_chip_s"] == pytest.approx(job["lifetime_chip_s"])


def test_mlperf_llama_405b_gets_analytic_flops(mlperf_run):
    imported, _, _, jobs = mlperf_run
    samples = by_job(imported, "profiler", LLAMA_405B_RUN)
    assert samples and {s["flops_source"] for s in samples} == {"ANALYTIC"}
    assert samples[0]["ideal_flops"] == pytest.approx(6 * 405.85e9 * 960 * 8192)  # 6·N·gbs·seq
    assert samples[0]["chips"] == 640 * 4  # number_of_nodes × accelerators_per_node
    assert samples[0]["step"] == 300 and samples[0]["duration_s"] == pytest.approx(
        (1759846760178 - 1759845785794) / 1e3 / 300
    )
    job = jobs[LLAMA_405B_RUN]
    assert job["accelerator"] == "gb200" and 0.5 < job["pg"] < 1.0


# ---- kineto ---------------------------------------------------------------
def test_kineto_traces_map_steps_and_reject_what_they_cannot(tmp_path):
    imported, summary = import_to("kineto", KINETO, tmp_path / "in")
    assert summary["jobs"] == 2 and summary["events"]["profiler"] == 0  # the samples carry no FLOP counts
    assert sorted(row["reason"] for row in rejected_rows(tmp_path / "in")) == [
        "no ProfilerStep#N annotations: no step to map",
        "no deviceProperties: the accelerator is unknown (pass --accelerator KEY)",
    ]
    steps = [(r["type"], r["step"], r["event_time"]) for r in by_job(imported, "runtime", V100_JOB)]
    assert [s[1] for s in steps] == [101, 101, 102, 102, 103, 103, 104, 104, 105, 105]
    assert steps[0] == ("STEP_START", 101, 1712195495502094) and steps[1][2] == int(1712195495502094.5 + 35115.869)
    assert {r["accelerator"] for r in imported.streams["scheduler"]} == {"v100", "mi250-gcd"}
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert manifest["reconciles"]
    assert jobs[V100_JOB]["productive_chip_s"] == pytest.approx(
        sum((b[2] - a[2]) / 1e6 for a, b in zip(steps[::2], steps[1::2]))
    )


def test_kineto_accelerator_flag_maps_a_trace_without_device_properties(tmp_path):
    imported, summary = import_to(
        "kineto", KINETO / "trace_filter__sampled_rank-0.json.gz", tmp_path / "in", accelerator="a100"
    )
    assert summary["rejected"] == {} and summary["jobs"] == 1
    submit = next(r for r in imported.streams["scheduler"] if r["type"] == "SUBMIT")
    assert (submit["accelerator"], submit["chips"]) == ("a100", 128)  # distributedInfo.world_size


# ---- mgm (hand-written fixture in the library's format, see tests/data/README.md) ----
def test_mgm_fixture_gives_the_hand_computed_categories(tmp_path):
    imported, summary = import_to(
        "mgm", FIXTURES / "mgm_goodput_log.jsonl", tmp_path / "in", accelerator="tpu-v5e", chips=16
    )
    assert summary["rejected"] == {"entry holds none of the recorder's keys": 1, "entry without a job_name": 1}
    assert [r["type"] for r in imported.streams["scheduler"]] == ["SUBMIT", "ALLOCATE", "PREEMPT", "ALLOCATE", "FINISH"]
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert manifest["reconciles"]
    job = jobs["llama-7b-v5e"]
    expected_s = {
        "lifetime": 320,
        "queued": 0,
        "idle": 14,
        "init": 70,
        "data_wait": 15,
        "checkpoint_save": 10,
        "checkpoint_restore": 10,
        "productive": 126,
        "lost": 75,
        "pending": 0,
        "compile": 0,
    }
    assert {name: job[f"{name}_chip_s"] / 16 for name in expected_s} == pytest.approx(expected_s)
    assert job["rg"] == pytest.approx(126 / 320)
