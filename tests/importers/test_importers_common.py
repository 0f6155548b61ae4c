"""What every importer promises (determinism, clear errors on corrupt sources, atomic output,
the CLI). The helpers the importer tests share are tests/importing.py's."""

from __future__ import annotations

import shutil

import pytest

from fleet_goodput.cli import main
from fleet_goodput.importers.common import SourceError
from importing import FIXTURES, PUBLIC_DATA, import_to, tree_bytes

# ---- what every importer promises ---------------------------------------------
MGM_LOG = FIXTURES / "mgm_goodput_log.jsonl"
MGM_FLAGS = {"accelerator": "tpu-v5e", "chips": 16}


@pytest.mark.parametrize(
    "name, source, flags",
    [
        ("philly", PUBLIC_DATA / "philly", {"limit": 200}),
        ("openb", PUBLIC_DATA / "openb", {"limit": 500}),
        ("mlperf", PUBLIC_DATA / "mlperf", {}),
        ("mlperf", PUBLIC_DATA / "mlperf-results", {}),
        ("philly", FIXTURES / "philly-cluster-job-log", {}),
        ("kineto", PUBLIC_DATA / "kineto", {}),
        ("mgm", MGM_LOG, MGM_FLAGS),
        (
            "logs",
            FIXTURES / "logs" / "megatron",
            {"profile": "megatron", "job": "gpt-8b", "accelerator": "h100", "chips": 16},
        ),
        ("kubernetes", FIXTURES / "kubernetes", {"cluster": "gke-1"}),
        ("slurm", FIXTURES / "slurm", {}),
    ],
)
def test_same_input_gives_byte_identical_output(tmp_path, name, source, flags):
    import_to(name, source, tmp_path / "first", **flags)
    import_to(name, source, tmp_path / "second", **flags)
    first, second = tree_bytes(tmp_path / "first"), tree_bytes(tmp_path / "second")
    assert first == second
    assert {
        "SOURCE.json",
        "import_rejected.jsonl",
        "import_caveats.jsonl",
        "scheduler/part-00000.avro",
        "runtime/part-00000.avro",
        "profiler/part-00000.avro",
    } <= set(first)


def _truncate(path, keep_fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])


def _copy(source, tmp_path):
    target = tmp_path / "source"
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        target.mkdir()
        shutil.copy(source, target / source.name)
    return target


def _corrupt_philly(root):
    _truncate(root / "jobs.json")
    return "jobs.json", ":"


def _corrupt_openb(root):
    _truncate(root / "openb_pod_list_default.csv")
    lines = (root / "openb_pod_list_default.csv").read_text().count("\n") + 1
    return "openb_pod_list_default.csv", f"line {lines}"


def _corrupt_mlperf(root):
    path = root / "results" / "Cisco__hpf_n8__dlrm_dcnv2__result_0.txt"
    lines = path.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"run_stop"' in line)
    path.write_bytes(b"".join(lines[:cut]) + lines[cut][:60])  # cut inside the run_stop record
    return path.name, f"line {cut + 1}"


def _corrupt_kineto(root):
    _truncate(root / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz", 0.7)
    return "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz", "truncated"


def _corrupt_mgm(root):
    path = root / MGM_LOG.name
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:20]) + lines[20][:25])
    return MGM_LOG.name, "line 21"


@pytest.mark.parametrize(
    "name, source, corrupt, flags",
    [
        ("philly", PUBLIC_DATA / "philly", _corrupt_philly, {}),
        ("openb", PUBLIC_DATA / "openb", _corrupt_openb, {}),
        ("mlperf", PUBLIC_DATA / "mlperf", _corrupt_mlperf, {}),
        ("kineto", PUBLIC_DATA / "kineto", _corrupt_kineto, {}),
        ("mgm", MGM_LOG, _corrupt_mgm, MGM_FLAGS),
    ],
)
def test_truncated_source_names_file_and_line_and_writes_nothing(tmp_path, name, source, corrupt, flags):
    root = _copy(source, tmp_path)
    file_name, where = corrupt(root)
    if name == "mgm":
        root = root / MGM_LOG.name
    out = tmp_path / "imported"
    with pytest.raises(SourceError) as error:
        import_to(name, root, out, **flags)
    assert file_name in str(error.value) and where in str(error.value)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["source"]  # no half-built folder left beside it


def test_cli_reports_a_corrupt_source_and_leaves_no_output(tmp_path, capsys):
    root = _copy(PUBLIC_DATA / "philly", tmp_path)
    _corrupt_philly(root)
    assert main(["import", "philly", str(root), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "jobs.json:" in err and "nothing was written" in err
    assert not (tmp_path / "out").exists()


def test_cli_imports_prints_rejections_and_protects_existing_output(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["import", "mgm", str(MGM_LOG), "--out", str(out), "--accelerator", "tpu-v5e", "--chips", "16"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "Imported 1 jobs" in printed and "entry without a job_name" in printed
    before = tree_bytes(out)
    assert main(args) == 2 and "--overwrite" in capsys.readouterr().err
    assert main(args + ["--overwrite"]) == 0 and tree_bytes(out) == before


def test_mgm_requires_accelerator_and_chips(tmp_path):
    with pytest.raises(SourceError, match="--accelerator KEY --chips N"):
        import_to("mgm", MGM_LOG, tmp_path / "out")


@pytest.mark.parametrize(
    "name, folder, file_name",
    [
        ("philly", PUBLIC_DATA / "philly", "jobs.json"),
        ("openb", PUBLIC_DATA / "openb", "openb_pod_list_default.csv"),
    ],
)
def test_cli_accepts_the_main_file_as_well_as_its_folder(tmp_path, capsys, name, folder, file_name):
    """`mpg import philly PATH/jobs.json` once failed with `…/jobs.json/jobs.json: missing`."""
    by_folder, by_file = tmp_path / "by-folder", tmp_path / "by-file"
    assert main(["import", name, str(folder), "--out", str(by_folder), "--limit", "30"]) == 0
    assert main(["import", name, str(folder / file_name), "--out", str(by_file), "--limit", "30"]) == 0
    assert "missing" not in capsys.readouterr().err
    assert tree_bytes(by_file) == tree_bytes(by_folder)
