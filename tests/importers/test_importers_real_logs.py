"""Real logs as they come (issue 10, "Real logs"): a run that died, blocks whose
counts repeat, FP8 runs, Kineto metadata at ts 0, CPU-only traces, OpenB GPU
constraints. Each case is a small source cut from the public samples at test
time (MLPerf: Apache-2.0, Kineto: MIT) or written by hand."""

from __future__ import annotations

import gzip
import json
import re
import shutil

import fastavro
import pytest

from fleet_goodput.importers.import_folder import CAVEATS_FILE
from fleet_goodput.importers.mlperf import _precision
from fleet_goodput.importers.mlperf_logs import mllog_records as _records
from importing import PUBLIC_DATA, by_job, import_to, rejected_rows, run_and_read

MLPERF = PUBLIC_DATA / "mlperf"
MI300X_SYSTEM = "AMD__MI300X_EPYC_9575F_pytorch_llama2_70b"
MI300X_RUN = f"{MI300X_SYSTEM}__llama2_70b_lora__result_0"
DELL_SYSTEM = "Dell__1xXE9680Lx8B200-SXM-180GB"
DELL_8B_RUN = f"{DELL_SYSTEM}__llama31_8b__result_0"
MI350X_RUN = "AMD__MI350X_EPYC_9575F_pytorch__llama31_8b__result_0"
UF_405B_RUN = "University-of-Florida__hpg.dgxb200x8.n32__llama31_405b__result_0"


def mlperf_source(root, runs: dict[str, str]):
    """A results/ + systems/ folder holding `runs` ({run name: log text})."""
    (root / "results").mkdir(parents=True)
    (root / "systems").mkdir()
    for run, text in runs.items():
        (root / "results" / f"{run}.txt").write_text(text)
        system = "__".join(run.split("__")[:2])
        shutil.copy(MLPERF / "systems" / f"{system}.json", root / "systems")
    return root


def log_text(run: str) -> str:
    return (MLPERF / "results" / f"{run}.txt").read_text()


def caveats(out) -> list[dict]:
    return [json.loads(line) for line in (out / CAVEATS_FILE).read_text().splitlines()]


def time_ms(line: str) -> int:
    return json.loads(line[line.index("{") :])["time_ms"]


# ---- MLPerf: a log without run_stop ---------------------------------------------------
def test_mlperf_log_without_run_stop_is_a_run_that_died_at_its_last_event(tmp_path):
    """Cut the MI300X log inside its third training block: no block_stop, no run_stop.
    Beside it, a run that ends later (the 405B run) sets the as-of time: the dead run
    must still end at its own last event (it once ran to the as-of: fleet SG 141%)."""
    lines = log_text(MI300X_RUN).splitlines(keepends=True)
    third_block = [i for i, line in enumerate(lines) if '"key": "block_start"' in line][2]
    cut = lines[: third_block + 2]  # the block_start and the tracked line after it
    last_ms = max(time_ms(line) for line in cut if ":::MLLOG" in line)
    source = mlperf_source(tmp_path / "src", {MI300X_RUN: "".join(cut), UF_405B_RUN: log_text(UF_405B_RUN)})
    imported, _ = import_to("mlperf", source, tmp_path / "in")

    scheduler = [(r["type"], r["event_time"]) for r in by_job(imported, "scheduler", MI300X_RUN)]
    assert scheduler[-1] == ("FAIL", last_ms * 1000)
    runtime = by_job(imported, "runtime", MI300X_RUN)
    assert (runtime[-1]["type"], runtime[-1]["event_time"]) == ("STEP_START", time_ms(lines[third_block]) * 1000)
    assert {
        "file": f"results/{MI300X_RUN}.txt",
        "item": MI300X_RUN,
        "caveat": "no run_stop: the run died; FAIL at its last event",
        "detail": f"last event at {last_ms} ms; a block left open is lost",
    } in caveats(tmp_path / "in")

    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert manifest["reconciles"]
    job = jobs[MI300X_RUN]
    init_start_ms = 1755476345692
    assert job["status"] == "FAILED"
    assert job["lifetime_chip_s"] == pytest.approx(8 * (last_ms - init_start_ms) / 1000)
    # No checkpoints in MLPerf: the steps of a run that failed are lost, and its open block with them.
    assert job["productive_chip_s"] == 0 and job["lost_chip_s"] > 0
    assert jobs[UF_405B_RUN]["status"] == "FINISHED"


# ---- MLPerf: block_stop repeats block_start's samples_count ---------------------------
def _without_block_steps(text: str) -> str:
    """The Dell 8B log as loggers without `step` write it (Cisco hpf_n8/n16, Nebius H200
    style): block_start and block_stop carry the block's samples_count only."""
    return "\n".join(
        re.sub(r', "step": \d+', "", line) if re.search(r'"key": "block_(start|stop)"', line) else line
        for line in text.split("\n")
    )


def _profiles(imported, run):
    return [(p["event_time"], p["step"], p["duration_s"], p["ideal_flops"]) for p in by_job(imported, "profiler", run)]


def test_mlperf_repeated_block_samples_count_takes_steps_from_the_evaluation_counts(tmp_path):
    original, _ = import_to(
        "mlperf", mlperf_source(tmp_path / "a", {DELL_8B_RUN: log_text(DELL_8B_RUN)}), tmp_path / "a-in"
    )
    stripped = _without_block_steps(log_text(DELL_8B_RUN))
    assert '"step"' not in "".join(line for line in stripped.split("\n") if '"key": "block_' in line)
    derived, summary = import_to("mlperf", mlperf_source(tmp_path / "b", {DELL_8B_RUN: stripped}), tmp_path / "b-in")
    assert len(_profiles(original, DELL_8B_RUN)) == 15
    assert _profiles(derived, DELL_8B_RUN) == _profiles(original, DELL_8B_RUN)  # the same steps, from eval counts
    assert not any(c.startswith("steps unknown") for c in summary["caveats"])


def test_mlperf_blocks_whose_steps_nothing_gives_put_the_reason_on_record(tmp_path):
    text = _without_block_steps(log_text(DELL_8B_RUN))
    text = "\n".join(
        re.sub(r', "samples_count": \d+', "", line) if re.search(r'"key": "eval_', line) else line
        for line in text.split("\n")
    )
    imported, _ = import_to("mlperf", mlperf_source(tmp_path / "src", {DELL_8B_RUN: text}), tmp_path / "in")
    assert _profiles(imported, DELL_8B_RUN) == []
    [caveat] = [c for c in caveats(tmp_path / "in") if c["caveat"].startswith("steps unknown")]
    assert caveat["item"] == DELL_8B_RUN and caveat["detail"] == "15 of 15 blocks"
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert jobs[DELL_8B_RUN]["pg"] is None and jobs[DELL_8B_RUN]["productive_chip_s"] > 0


def test_mlperf_every_run_without_pg_says_why(tmp_path):
    import_to("mlperf", MLPERF, tmp_path / "in")
    rows = caveats(tmp_path / "in")
    no_flops = {row["item"] for row in rows if row["caveat"].startswith("PG unknown")}
    profiled = {row["job_id"] for row in _read_profiled(tmp_path / "in")}
    every_run = {p.stem for p in (MLPERF / "results").glob("*.txt")}
    assert no_flops | profiled == every_run and not no_flops & profiled


def _read_profiled(folder):
    with open(folder / "profiler" / "part-00000.avro", "rb") as handle:
        return list(fastavro.reader(handle))


# ---- MLPerf: precision -------------------------------------------------------------------
def test_mlperf_fp8_runs_are_measured_against_the_fp8_peak(tmp_path):
    """The MI350X system notes say "FP8 Training": its samples carry precision fp8, and PG
    is ideal at the FP8 peak (4.6 PF), half of what the bf16 peak (2.3 PF) gave."""
    source = mlperf_source(tmp_path / "src", {MI350X_RUN: log_text(MI350X_RUN)})
    imported, _ = import_to("mlperf", source, tmp_path / "in")
    samples = by_job(imported, "profiler", MI350X_RUN)
    assert samples and {s["precision"] for s in samples} == {"fp8"}
    provenance = json.loads((tmp_path / "in" / "SOURCE.json").read_text())["precision_by_run"][MI350X_RUN]
    assert provenance == {"precision": "fp8", "evidence": "system sw_notes: 'FP8 Training'"}
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs[MI350X_RUN]
    # The ideal, recomputed from the samples: per block, steps × 6·N·tokens ÷ (chips × fp8 peak).
    steps = [s["step"] for s in samples]
    blocks = [b - a for a, b in zip([0] + steps, steps)]
    ideal_chip_s = sum(n * s["ideal_flops"] / 4614.0e12 for n, s in zip(blocks, samples))
    assert job["ideal_chip_s"] == pytest.approx(ideal_chip_s, rel=1e-9)
    assert 0 < job["pg"] < 0.5  # 53% against bf16; FP8 halves it


@pytest.mark.parametrize(
    ("lines", "system", "expected"),
    [
        (["0:   fp8: true\n"], {}, "fp8"),
        ([" 0:                  fp8='e4m3',\n"], {}, "fp8"),
        (["0:   fp8: hybrid\n"], {}, "fp8"),
        (["0:   fp8: false\n", "0:   fp8_amax_compute_algo: max\n"], {}, None),
        ([" 0:                  fp8=None,\n"], {}, None),
        (["0:   fp4: nvfp4\n", "0:   fp8: true\n"], {}, "fp4"),
        ([], {"sw_notes": "FP8 Training"}, "fp8"),
        ([], {"sw_notes": "NVFP4 training recipe"}, "fp4"),
        (["0:   precision: bf16-mixed\n"], {"sw_notes": ""}, None),
    ],
)
def test_mlperf_precision_comes_from_the_log_settings_or_the_system_notes(tmp_path, lines, system, expected):
    path = tmp_path / "log.txt"
    path.write_text("".join(lines) + ':::MLLOG {"key": "init_start", "time_ms": 1, "value": null}\n')
    _, settings = _records(path)
    assert _precision(settings, system)[0] == expected


# ---- Kineto ---------------------------------------------------------------------------
def _kineto_trace(tmp_path, name: str, events: list[dict], **top) -> None:
    trace = {"schemaVersion": 1, "traceEvents": events, **top}
    (tmp_path / name).write_bytes(gzip.compress(json.dumps(trace).encode()))


BASE_NS = 1_735_632_360_000_000_000  # a relative clock, as ROCm traces have
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85e9}


def _steps(first_us: float, count: int, step_us: float) -> list[dict]:
    return [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": first_us + n * step_us, "dur": step_us}
        for n in range(count)
    ]


def test_kineto_metadata_at_ts_zero_does_not_become_the_jobs_start(tmp_path):
    """ph M events (process names) at ts 0 on a relative clock once stretched 13 s of steps to 41.7 days."""
    first_us = 3.6e12  # 41.7 days after the clock's zero
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "ts": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "ts": 0, "args": {"name": "main"}},
        *_steps(first_us, 13, 1e6),
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": first_us + 10, "dur": 500, "args": {"device": 0}},
    ]
    _kineto_trace(tmp_path, "relative.json.gz", events, baseTimeNanoseconds=BASE_NS, deviceProperties=[A100])
    imported, _ = import_to("kineto", tmp_path / "relative.json.gz", tmp_path / "in")
    scheduler = [(r["type"], r["event_time"]) for r in imported.streams["scheduler"]]
    base_us = BASE_NS // 1000
    assert scheduler == [
        ("SUBMIT", base_us + int(first_us)),
        ("ALLOCATE", base_us + int(first_us)),
        ("FINISH", base_us + int(first_us + 13e6)),
    ]
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert jobs["relative"]["lifetime_chip_s"] == pytest.approx(13.0)


def test_kineto_cpu_only_trace_is_rejected_even_with_an_accelerator_flag(tmp_path):
    """A CPU-only trace (gloo, no kernels) once became 300 A100 chips."""
    events = [*_steps(1.7e15, 5, 1e5), {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.7e15 + 10, "dur": 50}]
    _kineto_trace(tmp_path, "cpu.json.gz", events, distributedInfo={"backend": "gloo", "world_size": 300})
    imported, summary = import_to("kineto", tmp_path / "cpu.json.gz", tmp_path / "in", accelerator="a100")
    assert summary["jobs"] == 0 and imported.streams["scheduler"] == []
    [row] = rejected_rows(tmp_path / "in")
    assert row["reason"].startswith("CPU-only trace") and row["detail"] == "world_size 300"


# ---- OpenB gpu_spec --------------------------------------------------------------------
def test_openb_gpu_spec_maps_to_catalogue_keys_and_reports_what_cannot(tmp_path):
    source = tmp_path / "openb"
    source.mkdir()
    shutil.copy(PUBLIC_DATA / "openb" / "openb_node_list_gpu_node.csv", source)
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
    )
    pods = [
        "p-any,1000,1024,1,1000,,LS,Succeeded,0,100,10",
        "p-nan,1000,1024,1,1000,nan,LS,Succeeded,0,100,10",
        "p-v100,1000,1024,2,1000,V100M16|V100M32,LS,Succeeded,0,100,10",
        "p-mixed,1000,1024,1,1000,T4|P100,LS,Failed,0,100,10",
        "p-a10,1000,1024,1,500,A10,BE,Succeeded,0,100,10",
        "p-g2,1000,1024,1,1000,G2,LS,Succeeded,0,100,10",
        "p-g3v,1000,1024,1,1000,G3|V100M32,LS,Succeeded,0,200,10",
    ]
    (source / "openb_pod_list_gpuspec.csv").write_text("\n".join([header, *pods]) + "\n")
    imported, summary = import_to("openb", source / "openb_pod_list_gpuspec.csv", tmp_path / "in")
    topology = {r["job_id"]: r["topology"] for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"}
    assert topology == {
        "p-any": None,
        "p-nan": None,
        "p-v100": "gpu:v100",
        "p-mixed": "gpu:p100|t4",
        "p-a10": "gpu:a10",
        "p-g2": "gpu:G2",
        "p-g3v": "gpu:G3|V100M32",
    }
    assert {r["accelerator"] for r in imported.streams["scheduler"]} == {"openb-gpu"}  # capacity stays one pool
    assert summary["caveats"] == {"gpu_spec names a GPU model with no catalogue key (undisclosed)": 2}
    source_json = json.loads((tmp_path / "in" / "SOURCE.json").read_text())
    assert source_json["gpu_spec"]["unmapped_models"] == {"G2": 1, "G3": 1}
    manifest, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    assert manifest["reconciles"] and len(jobs) == 7


def test_mlperf_a_block_without_its_own_evaluation_does_not_borrow_the_next_ones_count(tmp_path):
    """Drop the evaluation after the first block of the step-less Dell log: the first block's
    steps are unknown (the next evaluation counts two blocks), and so is where the second
    starts; from the third on, each block runs from one evaluation's count to the next."""
    lines = _without_block_steps(log_text(DELL_8B_RUN)).split("\n")
    first_eval = [i for i, line in enumerate(lines) if re.search(r'"key": "eval_(start|accuracy|stop)"', line)][:3]
    text = "\n".join(line for i, line in enumerate(lines) if i not in first_eval)
    imported, _ = import_to("mlperf", mlperf_source(tmp_path / "src", {DELL_8B_RUN: text}), tmp_path / "in")
    original, _ = import_to(
        "mlperf", mlperf_source(tmp_path / "a", {DELL_8B_RUN: log_text(DELL_8B_RUN)}), tmp_path / "a-in"
    )
    assert _profiles(imported, DELL_8B_RUN) == _profiles(original, DELL_8B_RUN)[2:]
    [caveat] = [c for c in caveats(tmp_path / "in") if c["caveat"].startswith("steps unknown")]
    assert caveat["detail"] == "2 of 15 blocks"


def test_mlperf_pg_on_an_assumed_precision_names_the_peak_it_used(tmp_path):
    """Dell's 8B log and its system notes state no precision: PG rests on the B200's bf16 peak
    (2,250 TFLOP/s dense in the catalogue), and the caveat says so and what FP8 or FP4 would give."""
    import_to("mlperf", mlperf_source(tmp_path / "src", {DELL_8B_RUN: log_text(DELL_8B_RUN)}), tmp_path / "in")
    [row] = [c for c in caveats(tmp_path / "in") if c["caveat"].startswith("precision not stated")]
    assert row["detail"] == (
        "PG measured against the b200 bf16 peak, 2,250 TFLOP/s per chip; had it trained in fp8 "
        "(4,500 TFLOP/s), PG would be 0.5 x as high; had it trained in fp4 (9,000 TFLOP/s), "
        "PG would be 0.25 x as high"
    )


def test_every_trace_or_log_not_imported_has_its_line(tmp_path):
    """A trace of a device the catalogue lacks, and the traces and logs past --limit: each a rejected row."""
    events = [
        *_steps(1.7e15, 3, 1e5),
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1.7e15 + 10, "dur": 50, "args": {"device": 0}},
    ]
    _kineto_trace(tmp_path, "a-known.json.gz", events, deviceProperties=[A100])
    _kineto_trace(tmp_path, "b-unknown.json.gz", events, deviceProperties=[{"id": 0, "name": "NVIDIA Z9000"}])
    _kineto_trace(tmp_path, "c-past-limit.json.gz", events, deviceProperties=[A100])
    import_to("kineto", tmp_path, tmp_path / "in", limit=2)
    assert sorted((row["file"], row["reason"], row["detail"]) for row in rejected_rows(tmp_path / "in")) == [
        ("b-unknown.json.gz", "device not recognised as one catalogue accelerator", "NVIDIA Z9000"),
        ("c-past-limit.json.gz", "beyond --limit 2: not read", ""),
    ]
    _, summary = import_to("mlperf", MLPERF, tmp_path / "mlperf", limit=16)
    assert summary["jobs"] == 16 and summary["rejected"] == {"beyond --limit 16: not read": 1}
