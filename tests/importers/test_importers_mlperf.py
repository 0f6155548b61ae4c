"""MLPerf logs as the results repositories publish them (issue 22): blocks whose edges repeat
the running sample total, blocks that never stop, a first block that never starts, GPT-3's
token counts, H200 NVL systems, the repository's own layout and single log files, and a
part name a user catalogue adds. The logs are real (tests/data/public/mlperf-results,
byte-identical) or cut from real ones (tests/data/mlperf-cut); every expected figure is
computed here from the log's own lines, without the importer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleet_goodput.cli import main
from fleet_goodput.configs import DEFAULT_CONFIG
from fleet_goodput.core.config import load_catalogue, part_key, part_names
from importing import FIXTURES, PUBLIC_DATA, SETTINGS, by_job, import_to, rejected_rows, run_and_read

RESULTS = PUBLIC_DATA / "mlperf-results"
V50, V40 = RESULTS / "training_results_v5.0", RESULTS / "training_results_v4.0"
NVL_LOG = V50 / "Dell/results/XE7740x8H200-NVL-141GB/llama2_70b_lora/result_0.txt"
UNCLOSED_LOG = V50 / "NVIDIA/results/tyche_ngpu512_ngc25.04_nemo/llama31_405b/result_0.txt"
GPT3_LOG = V40 / "Google/results/cloud-tpu-v5p-1024-maxtext/gpt3/result_0.txt"
HABANA_LOG = V40 / "Intel-HabanaLabs/results/HLS-Gaudi2-N128-PT/gpt3/result_0.txt"
CUT = FIXTURES / "mlperf-cut"
CISCO_LOG = CUT / "training_results_v5.1/Cisco/results/hpf_n8/llama31_8b/result_0.txt"
NVL_JOB = "Dell__XE7740x8H200-NVL-141GB__llama2_70b_lora__result_0"
UNCLOSED_JOB = "NVIDIA__tyche_ngpu512_ngc25.04_nemo__llama31_405b__result_0"
GPT3_JOB = "Google__cloud-tpu-v5p-1024-maxtext__gpt3__result_0"
HABANA_JOB = "Intel-HabanaLabs__HLS-Gaudi2-N128-PT__gpt3__result_0"
CISCO_JOB = "Cisco__hpf_n8__llama31_8b__result_0"


def mllog(path: Path) -> list[dict]:
    """The `:::MLLOG` records of a log, in line order."""
    return [
        json.loads(line[line.index(":::MLLOG") + 8 :]) for line in path.read_text().splitlines() if ":::MLLOG" in line
    ]


def value(records: list[dict], key: str):
    return next(r["value"] for r in records if r["key"] == key)


def times_us(records: list[dict], key: str) -> list[int]:
    return [r["time_ms"] * 1000 for r in records if r["key"] == key]


def counts(records: list[dict], key: str, field: str) -> list[int]:
    return [r["metadata"][field] for r in records if r["key"] == key]


def caveat_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "import_caveats.jsonl").read_text().splitlines()]


def pg_from(blocks: list[tuple[int, int, int]], flops_per_step: float, peak: float, chips: int) -> float:
    """PG of a run from its blocks (start µs, end µs, steps): ideal chip-seconds (the FLOPs at
    one chip's peak) ÷ the chip-seconds the blocks took."""
    ideal_chip_s = sum(steps * flops_per_step / peak for _, _, steps in blocks)
    return ideal_chip_s / (chips * sum((end - start) / 1e6 for start, end, _ in blocks))


# ---- steps from evaluations, never from a repeated running total ----------------------
def test_mlperf_running_total_on_both_block_edges_is_not_the_blocks_size(tmp_path):
    """Cisco's hpf_n8 Llama 3.1 8B log writes the running total at the block's start on
    both block_start and block_stop (0, 21888, 43776 ...). Taken as the block's size, it
    credited block k with about k blocks of steps (PG above 1)."""
    records = mllog(CISCO_LOG)
    batch, sequence = value(records, "global_batch_size"), value(records, "max_sequence_length")
    starts, stops = times_us(records, "block_start"), times_us(records, "block_stop")
    assert counts(records, "block_start", "samples_count") == counts(records, "block_stop", "samples_count")
    done = [count // batch for count in counts(records, "eval_accuracy", "samples_count")]  # cumulative steps
    steps = [b - a for a, b in zip([0] + done, done)]
    imported, _ = import_to("mlperf", CUT, tmp_path / "in")
    samples = by_job(imported, "profiler", CISCO_JOB)
    assert [(p["event_time"], p["step"]) for p in samples] == list(zip(stops, done))
    assert [p["duration_s"] for p in samples] == pytest.approx(
        [(stop - start) / 1e6 / n for start, stop, n in zip(starts, stops, steps)]
    )
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    expected = pg_from(list(zip(starts, stops, steps)), 6 * 8.03e9 * batch * sequence, 989e12, 64)  # 8 x 8 H100, bf16
    assert jobs[CISCO_JOB]["pg"] == pytest.approx(expected, rel=1e-6)
    assert 0 < expected < 1


def test_mlperf_blocks_without_block_stop_end_at_the_next_block_or_evaluation(tmp_path):
    """NVIDIA's v5.0 405B log on 512 GB200 has six block_starts and one block_stop (after the
    last evaluation), and no eval_start. Each of the first five blocks ends at the evaluation
    that follows it, the last at that block_stop; the steps are the evaluations' cumulative
    sample counts ÷ the batch (312 in all). The importer once kept one block of 260 steps."""
    records = mllog(UNCLOSED_LOG)
    assert (len(times_us(records, "block_start")), len(times_us(records, "block_stop"))) == (6, 1)
    batch, sequence = value(records, "global_batch_size"), value(records, "max_sequence_length")
    starts = times_us(records, "block_start")
    evaluated = times_us(records, "eval_accuracy")[:-1] + times_us(records, "block_stop")
    done = [count // batch for count in counts(records, "eval_accuracy", "samples_count")]
    steps = [b - a for a, b in zip([0] + done, done)]
    assert done[-1] == 279552 // 896 == 312
    imported, _ = import_to("mlperf", UNCLOSED_LOG, tmp_path / "in")
    spans = [
        (r["type"], r["event_time"], r["step"])
        for r in by_job(imported, "runtime", UNCLOSED_JOB)
        if r["type"].startswith("STEP")
    ]
    expected = []
    for start, end, first, last in zip(starts, evaluated, [0] + done, done):
        expected += [("STEP_START", start, first + 1), ("STEP_END", end, last)]
    assert spans == expected
    rows = {row["caveat"]: row["detail"] for row in caveat_rows(tmp_path / "in")}
    assert (
        rows["blocks without block_stop: each ends at the next block_start, evaluation record or run_stop"]
        == "5 of 6 blocks"
    )
    assert "evaluations without eval_start: their time cannot be told from training's and counts as step time" in rows
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs[UNCLOSED_JOB]
    assert job["productive_chip_s"] == pytest.approx(512 * sum(e - s for s, e in zip(starts, evaluated)) / 1e6)
    assert job["pg"] == pytest.approx(
        pg_from(list(zip(starts, evaluated, steps)), 6 * 405.85e9 * batch * sequence, 2500e12, 512), rel=1e-6
    )  # GB200 bf16


# ---- GPT-3 -----------------------------------------------------------------------------
def test_mlperf_gpt3_gets_pg_from_its_token_counts(tmp_path):
    """MaxText's GPT-3 log (TPU v5p, 128 x 4 chips) counts tokens: evaluations carry the
    cumulative `epoch_num`; a step is global_batch_size x max_sequence_length tokens. Its first
    block has a block_stop but no block_start: it starts at run_start."""
    records = mllog(GPT3_LOG)
    batch, sequence = value(records, "global_batch_size"), value(records, "max_sequence_length")
    run_start = times_us(records, "run_start")[0]
    starts, stops = [run_start] + times_us(records, "block_start"), times_us(records, "block_stop")
    done = [tokens // (batch * sequence) for tokens in counts(records, "eval_accuracy", "epoch_num")]
    steps = [b - a for a, b in zip([0] + done, done)]
    assert len(starts) == len(stops) == len(done) and set(steps) == {12}
    imported, summary = import_to("mlperf", GPT3_LOG, tmp_path / "in")
    samples = by_job(imported, "profiler", GPT3_JOB)
    assert [(p["event_time"], p["step"]) for p in samples] == list(zip(stops, done))
    assert {p["ideal_flops"] for p in samples} == {6 * 175.0e9 * batch * sequence}
    assert summary["caveats"]["a first block_stop without block_start: the block starts at run_start"] == 1
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs[GPT3_JOB]
    assert (job["accelerator"], job["requested_chips"]) == ("tpu-v5p", 512)
    assert job["pg"] == pytest.approx(
        pg_from(list(zip(starts, stops, steps)), 6 * 175.0e9 * batch * sequence, 459e12, 512), rel=1e-6
    )


def test_mlperf_a_block_with_evaluations_inside_is_split_at_them(tmp_path):
    """Habana's GPT-3 log (128 x 8 Gaudi 2) opens one block for the whole run and evaluates
    inside it, each eval_start stamped with the tokens trained so far. Each part between two
    evaluations is its own block, its steps from that count; the 20 ms after the last
    evaluation, before block_stop, has no count (the caveat says 1 block)."""
    records = mllog(HABANA_LOG)
    assert (len(times_us(records, "block_start")), len(times_us(records, "block_stop"))) == (1, 1)
    batch, sequence = value(records, "global_batch_size"), value(records, "max_sequence_length")
    starts = times_us(records, "block_start") + times_us(records, "eval_stop")[:-1]
    ends = times_us(records, "eval_start")
    done = [tokens // (batch * sequence) for tokens in counts(records, "eval_start", "epoch_num")]
    steps = [b - a for a, b in zip([0] + done, done)]
    imported, summary = import_to("mlperf", HABANA_LOG, tmp_path / "in")
    samples = by_job(imported, "profiler", HABANA_JOB)
    assert [(p["event_time"], p["step"]) for p in samples] == list(zip(ends, done))
    assert (
        summary["caveats"][
            "steps unknown for some blocks: neither the block's edges nor an evaluation's "
            "cumulative count give them; those blocks have no profiler sample"
        ]
        == 1
    )
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    job = jobs[HABANA_JOB]
    assert (job["accelerator"], job["requested_chips"]) == ("gaudi2", 1024)
    assert job["pg"] == pytest.approx(
        pg_from(list(zip(starts, ends, steps)), 6 * 175.0e9 * batch * sequence, 432e12, 1024), rel=1e-6
    )  # the 20 ms part: unprofiled, not in PG


# ---- parts -------------------------------------------------------------------------------
def test_mlperf_h200_nvl_system_gets_its_own_part(tmp_path):
    """Dell's XE7740 names its GPUs "NVIDIA H200-NVL-141GB": the NVL part (835.5 TFLOP/s bf16
    dense), not the SXM one (989)."""
    system = json.loads((V50 / "Dell/systems/XE7740x8H200-NVL-141GB.json").read_text())
    assert system["accelerator_model_name"] == "NVIDIA H200-NVL-141GB"
    imported, _ = import_to("mlperf", NVL_LOG, tmp_path / "in")
    assert {r["accelerator"] for r in by_job(imported, "scheduler", NVL_JOB)} == {"h200-nvl"}
    assert SETTINGS.accelerators["h200-nvl"].peak_flops == {"bf16": 835.5e12, "fp8": 1670.5e12}
    assert SETTINGS.accelerators["h200"].peak_flops == {"bf16": 989e12, "fp8": 1979e12}


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200-NVL-141GB", "h200-nvl"),
        ("NVIDIA H200 NVL 141GB", "h200-nvl"),
        ("NVIDIA H200-SXM5-141GB", "h200"),
        ("NVIDIA GH200 Grace Hopper Superchip", "gh200"),
        ("NVIDIA Blackwell Ultra GPU (GB300)", "gb300"),
        ("NVIDIA Blackwell Ultra GPU (B300-SXM-270GB)", "b300"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10", "a10"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("H100 NVL Tensor Core GPU (PCIe)", "h100-nvl"),
        ("Intel(R) Gaudi(R) 2 AI Accelerator", "gaudi2"),
        ("AMD Instinct MI325X 256GB HBM3E DLC", "mi325x"),
        ("TPU-trillium", "tpu-v6e"),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_the_longest_matching_part_name_wins(name, key):
    """Names as MLPerf Training systems v4.0 to v5.1 write them; a desktop card is not in the catalogue."""
    assert part_key(part_names(SETTINGS.accelerators), name) == key


def test_a_user_catalogue_adds_a_part_and_its_names(tmp_path):
    """A part the bundled catalogue lacks is rejected, naming the part; a user catalogue that
    adds it with its `names` maps the same system to it."""
    source = tmp_path / "src"
    shutil.copytree(RESULTS / "training_results_v5.0/Dell", source / "Dell")
    system_file = source / "Dell/systems/XE7740x8H200-NVL-141GB.json"
    system = json.loads(system_file.read_text())
    system["accelerator_model_name"] = "Example Accelerator XPU-9 96GB"
    system_file.write_text(json.dumps(system))
    imported, _ = import_to("mlperf", source, tmp_path / "bundled")
    assert [(r.reason, r.detail) for r in imported.rejections] == [
        (
            "accelerator not in the catalogue (a catalogue entry's `names` maps part names to keys)",
            "Example Accelerator XPU-9 96GB",
        )
    ]
    catalogue = tmp_path / "catalogue.yaml"
    catalogue.write_text(
        Path(DEFAULT_CONFIG).with_name("accelerators.yaml").read_text()
        + "xpu-9:\n  names: ['XPU-9']\n  peak_flops: {bf16: 1.0e15}\n  hbm_bytes_per_s: 4.0e12\n"
        "  source: an example part\n"
    )
    accelerators = load_catalogue(catalogue)
    imported, summary = import_to(
        "mlperf", source, tmp_path / "user", accelerators=frozenset(accelerators), part_names=part_names(accelerators)
    )
    assert summary["jobs"] == 1 and {r["accelerator"] for r in imported.streams["scheduler"]} == {"xpu-9"}
    # The same from the command line, the catalogue named by a settings file as `mpg run` takes it.
    (tmp_path / "settings.yaml").write_text("accelerators: catalogue.yaml\n")
    assert (
        main(
            [
                "import",
                "mlperf",
                str(source),
                "--out",
                str(tmp_path / "cli"),
                "--config",
                str(tmp_path / "settings.yaml"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "cli" / "SOURCE.json").read_text())["jobs"] == 1


# ---- layouts -------------------------------------------------------------------------------
def test_mlperf_reads_the_results_repositorys_own_layout(tmp_path):
    """<submitter>/results/<system>/<benchmark>/result_<n>.txt beside <submitter>/systems/<system>.json,
    at any depth: every log is a run, named <submitter>__<system>__<benchmark>__result_<n>."""
    imported, summary = import_to("mlperf", RESULTS, tmp_path / "in")
    assert summary["rejected"] == {} and summary["jobs"] == 4
    submits = {r["job_id"]: (r["cluster"], r["chips"]) for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"}
    assert submits == {
        NVL_JOB: ("Dell__XE7740x8H200-NVL-141GB", 8),
        UNCLOSED_JOB: ("NVIDIA__tyche_ngpu512_ngc25.04_nemo", 128 * 4),
        GPT3_JOB: ("Google__cloud-tpu-v5p-1024-maxtext", 128 * 4),
        HABANA_JOB: ("Intel-HabanaLabs__HLS-Gaudi2-N128-PT", 128 * 8),
    }
    source = json.loads((tmp_path / "in" / "SOURCE.json").read_text())
    assert len(source["inputs"]) == 8  # four logs and their four systems


def test_mlperf_reads_one_log_file_and_asks_for_what_it_lacks(tmp_path, monkeypatch):
    """A log inside the layout finds its system, even named from its own folder; a lone log has
    none: it is rejected saying so, and imported with --accelerator and --chips."""
    imported, summary = import_to("mlperf", NVL_LOG, tmp_path / "in")
    assert summary["jobs"] == 1 and by_job(imported, "scheduler", NVL_JOB)[0]["chips"] == 8
    monkeypatch.chdir(NVL_LOG.parent)
    imported, _ = import_to("mlperf", Path(NVL_LOG.name), tmp_path / "here")
    assert {r["job_id"] for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"} == {NVL_JOB}
    monkeypatch.undo()
    lone = tmp_path / "lone" / "result_0.txt"
    lone.parent.mkdir()
    shutil.copy(NVL_LOG, lone)
    _, summary = import_to("mlperf", lone, tmp_path / "lone-in")
    assert summary["jobs"] == 0
    [row] = rejected_rows(tmp_path / "lone-in")
    assert row["reason"] == "no matching system description (or pass --accelerator KEY --chips N)"
    imported, summary = import_to("mlperf", lone, tmp_path / "flags-in", accelerator="h200-nvl", chips=8)
    submit = next(r for r in imported.streams["scheduler"] if r["type"] == "SUBMIT")
    assert (submit["job_id"], submit["accelerator"], submit["chips"]) == ("result_0", "h200-nvl", 8)
