"""Importers hold bounded input: a file that expands past the limit, JSON nested too deep, numbers
that are not finite, times outside 1970-2100 and impossible chip counts are each rejected with a
reason, the rest of the import goes on unchanged, and `mpg import` stops when no job is left."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleet_goodput.cli import main
from fleet_goodput.importers.common import UsageError
from importing import PUBLIC_DATA, import_to, rejected_rows
from test_importers_common import MGM_FLAGS, MGM_LOG

AMD_TRACE = PUBLIC_DATA / "kineto" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
NOT_FINITE = "a number that is not finite (NaN, Infinity or too large)"
TOO_DEEP = "JSON nested too deeply to read"
DEEP_DETAIL = "more than about 1,000 levels"  # Python's recursion limit
DEEP = "[" * 100_000 + "]" * 100_000


def _row(file: str, reason: str, detail: str, where: str = "file", item: str | None = None) -> dict:
    return {"file": file, "where": where, "item": file if item is None else item, "reason": reason, "detail": detail}


def _amd_trace_with(change) -> str:
    """The AMD sample trace as JSON text, its events changed by `change(events)`."""
    trace = json.loads(gzip.decompress(AMD_TRACE.read_bytes()))
    change([e for e in trace["traceEvents"] if e.get("ph") != "M" and "ts" in e])
    return json.dumps(trace)


def _last_event_at(literal: str):
    """The AMD sample trace as JSON text, its last event's time written as the literal."""

    def change(events):
        events[-1]["ts"] = "__TS__"

    return lambda: _amd_trace_with(change).replace('"__TS__"', literal)


def _kineto_source(tmp_path: Path, name: str, content: bytes | str | None) -> Path:
    """A folder with the AMD sample trace and, unless None, one more file `name`."""
    source = tmp_path / "kineto"
    source.mkdir()
    shutil.copy(AMD_TRACE, source / AMD_TRACE.name)
    if content is not None:
        (source / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return source


@pytest.fixture(scope="module")
def amd_alone(tmp_path_factory):
    root = tmp_path_factory.mktemp("amd")
    imported, _ = import_to("kineto", _kineto_source(root, "", None), root / "out")
    return imported.streams


@pytest.mark.parametrize(
    "name, content, reason, detail",
    [
        (
            "bomb.json.gz",
            lambda: gzip.compress(b'{"traceEvents": [' + b" " * (64 << 20) + b"]}", 9),
            "larger than 16 MiB once decompressed",
            "--max-expanded-mib raises the limit",
        ),
        (
            "big.json",
            lambda: '{"traceEvents": [' + " " * (17 << 20) + "]}",
            "larger than 16 MiB",
            "--max-expanded-mib raises the limit",
        ),
        ("deep.json", lambda: DEEP, TOO_DEEP, DEEP_DETAIL),
        ("nan.json", _last_event_at("NaN"), NOT_FINITE, "NaN"),
        ("infinity.json", _last_event_at("-Infinity"), NOT_FINITE, "-Infinity"),
        ("overflow.json", _last_event_at("1e400"), NOT_FINITE, "1e400"),
        (
            "far.json",
            _last_event_at("1e308"),
            "the trace's last timestamp is not a time from 1970 up to 2100",
            "1e+308",
        ),
        (
            "crowd.json",
            lambda: _amd_trace_with(lambda events: None).replace(
                '"traceEvents"', '"distributedInfo": {"world_size": 1e40}, "traceEvents"', 1
            ),
            "distributedInfo.world_size is not a whole number of chips from 1 to 2,147,483,647",
            "1e+40",
        ),
    ],
)
def test_a_kineto_trace_past_a_limit_is_rejected_and_the_others_imported(
    tmp_path, amd_alone, name, content, reason, detail
):
    source = _kineto_source(tmp_path, name, content())
    imported, summary = import_to("kineto", source, tmp_path / "out", max_expanded_bytes=16 << 20)
    assert rejected_rows(tmp_path / "out") == [_row(name, reason, detail)]
    assert summary["jobs"] == 1 and imported.streams == amd_alone  # the sample trace, as imported alone


def _mlperf_with(tmp_path: Path, changes: dict[str, str]) -> tuple[Path, dict[str, int]]:
    """A copy of the MLPerf sample whose result file (by index) has the time_ms of its first
    record written as the literal; returns the folder and the changed line of each file."""
    source = tmp_path / "mlperf"
    shutil.copytree(PUBLIC_DATA / "mlperf", source)
    results, lines = sorted((source / "results").glob("*.txt")), {}
    for index, literal in changes.items():
        text = results[index].read_text().splitlines(keepends=True)
        number = next(n for n, line in enumerate(text) if ":::MLLOG" in line)
        text[number] = re.sub(r'"time_ms": [0-9.e+]+', f'"time_ms": {literal}', text[number], count=1)
        results[index].write_text("".join(text))
        lines[results[index].stem] = number + 1
    return source, lines


def test_an_mlperf_run_with_a_time_that_is_no_time_is_rejected_and_the_others_imported(tmp_path):
    source, lines = _mlperf_with(tmp_path, {0: "NaN", 1: "1e308"})
    (nan_run, nan_line), (far_run, far_line) = sorted(lines.items())
    imported, summary = import_to("mlperf", source, tmp_path / "out")
    assert rejected_rows(tmp_path / "out") == [
        _row(f"results/{nan_run}.txt", NOT_FINITE, f"line {nan_line}: NaN", item=nan_run),
        _row(
            f"results/{far_run}.txt",
            "time_ms is not a time from 1970 up to 2100",
            f"line {far_line}: 1e+308",
            item=far_run,
        ),
    ]
    assert summary["jobs"] == 17 - 2
    assert not {nan_run, far_run} & {r["job_id"] for r in imported.streams["scheduler"] if r["job_id"]}


def test_an_mlperf_log_line_longer_than_the_limit_rejects_its_run_unread(tmp_path):
    source, _ = _mlperf_with(tmp_path, {})
    log = sorted((source / "results").glob("*.txt"))[0]
    log.write_text(log.read_text() + "x" * (2 << 20) + "\n")
    lines = log.read_text().count("\n")
    _, summary = import_to("mlperf", source, tmp_path / "out", max_expanded_bytes=1 << 20)
    assert rejected_rows(tmp_path / "out") == [
        _row(
            f"results/{log.name}",
            "a line longer than 1 MiB",
            f"line {lines}: --max-expanded-mib raises the limit",
            item=log.stem,
        )
    ]
    assert summary["jobs"] == 17 - 1


def test_an_mlperf_run_whose_system_description_is_nested_too_deep_is_rejected(tmp_path):
    source, _ = _mlperf_with(tmp_path, {})
    run = sorted((source / "results").glob("*.txt"))[0].stem
    system = "__".join(run.split("__")[:2])
    (source / "systems" / f"{system}.json").write_text(DEEP)
    _, summary = import_to("mlperf", source, tmp_path / "out")
    rejected = rejected_rows(tmp_path / "out")
    assert rejected[0] == _row(f"results/{run}.txt", TOO_DEEP, f"systems/{system}.json: {DEEP_DETAIL}", item=run)
    assert all(row["reason"] == TOO_DEEP for row in rejected)  # every run of that system, and no other
    assert summary["jobs"] == 17 - len(rejected)


def test_mgm_log_lines_past_a_limit_are_rejected_and_the_job_imported_unchanged(tmp_path):
    unchanged, _ = import_to("mgm", MGM_LOG, tmp_path / "unchanged", **MGM_FLAGS)
    log = tmp_path / MGM_LOG.name
    log.write_text(
        MGM_LOG.read_text()
        + "\n".join(
            [
                '{"job_name": "llama-7b-v5e", "job_end_time": NaN}',
                '{"job_name": "llama-7b-v5e", "job_start_time": 1e308}',
                '{"job_name": "llama-7b-v5e", "checkpoint_manager_blocking_start_time": 1735689700.0, "event_type": "save", '
                '"step": 3, "checkpoint_manager_blocking_duration_secs": 1e300}',
                DEEP,
                '{"job_name": "llama-7b-v5e", "tpu_init_end_time": ' + "9" * 400 + "}",
            ]
        )
        + "\n"
    )
    imported, _ = import_to("mgm", log, tmp_path / "out", **MGM_FLAGS)
    rows, before = rejected_rows(tmp_path / "out"), rejected_rows(tmp_path / "unchanged")
    assert [row for row in rows if row not in before] == [
        _row(log.name, NOT_FINITE, "NaN", where="line 39", item=""),
        _row(
            log.name,
            "job_start_time is not a time from 1970 up to 2100",
            "1e+308",
            where="line 40",
            item="llama-7b-v5e",
        ),
        _row(
            log.name,
            "checkpoint_manager_blocking_duration_secs is more seconds than from 1970 to 2100",
            "1e+300",
            where="line 41",
            item="llama-7b-v5e",
        ),
        _row(log.name, TOO_DEEP, DEEP_DETAIL, where="line 42", item=""),
        # An integer too large for a float: one rejection, not an OverflowError ending the import.
        _row(
            log.name,
            "tpu_init_end_time is not a time from 1970 up to 2100",
            "9" * 80,
            where="line 43",
            item="llama-7b-v5e",
        ),
    ]
    assert len(rows) == len(before) + 5 and imported.streams == unchanged.streams


def test_an_mgm_log_line_longer_than_the_limit_is_rejected_unread(tmp_path):
    unchanged, _ = import_to("mgm", MGM_LOG, tmp_path / "unchanged", **MGM_FLAGS)
    log = tmp_path / MGM_LOG.name
    log.write_text(MGM_LOG.read_text() + '{"job_name": "' + "x" * (3 << 20) + '"}\n')
    imported, _ = import_to("mgm", log, tmp_path / "out", max_expanded_bytes=1 << 20, **MGM_FLAGS)
    rows, before = rejected_rows(tmp_path / "out"), rejected_rows(tmp_path / "unchanged")
    assert [row for row in rows if row not in before] == [
        _row(log.name, "a line longer than 1 MiB", "--max-expanded-mib raises the limit", where="line 39", item="")
    ]
    assert imported.streams == unchanged.streams


def test_a_philly_job_with_more_gpus_than_an_event_holds_is_rejected(tmp_path):
    source = tmp_path / "philly"
    shutil.copytree(PUBLIC_DATA / "philly", source)
    jobs = json.loads((source / "jobs.json").read_text())
    jobs[0]["num_gpus"] = 10**30
    (source / "jobs.json").write_text(json.dumps(jobs))
    _, summary = import_to("philly", source, tmp_path / "out", limit=20)
    assert rejected_rows(tmp_path / "out") == [
        _row(
            "jobs.json",
            "num_gpus is not a whole number of chips from 1 to 2,147,483,647",
            str(10**30),
            where="record 0",
            item=jobs[0]["id"],
        )
    ]
    assert summary["jobs"] == 19


def test_an_openb_pod_deleted_after_2100_is_rejected(tmp_path):
    _, unchanged = import_to("openb", PUBLIC_DATA / "openb", tmp_path / "unchanged", limit=20)
    source = tmp_path / "openb"
    shutil.copytree(PUBLIC_DATA / "openb", source)
    pods = source / "openb_pod_list_default.csv"
    lines = pods.read_text().splitlines(keepends=True)
    fields = lines[1].split(",")
    fields[9] = str(10**20)  # deletion_time
    lines[1] = ",".join(fields)
    pods.write_text("".join(lines))
    _, summary = import_to("openb", source, tmp_path / "out", limit=20)
    rows, before = rejected_rows(tmp_path / "out"), rejected_rows(tmp_path / "unchanged")
    assert [row for row in rows if row not in before] == [
        _row(
            pods.name,
            "deletion_time is more seconds than from 1970 to 2100",
            str(10**20),
            where="line 2",
            item=fields[0],
        )
    ]
    assert len(rows) == len(before) + 1 and summary["jobs"] == unchanged["jobs"] - 1


def test_mpg_import_stops_when_every_input_is_rejected(tmp_path, capsys):
    source, out = tmp_path / "kineto", tmp_path / "out"
    source.mkdir()
    (source / "deep.json").write_text(DEEP)
    (source / "bomb.json.gz").write_bytes(gzip.compress(b" " * (2 << 20)))
    assert main(["import", "kineto", str(source), "--out", str(out), "--max-expanded-mib", "1"]) == 1
    assert capsys.readouterr().err.endswith(
        f"mpg import: nothing usable in {source}: no job could be imported, every input was rejected:\n"
        f"         1  {TOO_DEEP}\n"
        "         1  larger than 1 MiB once decompressed\n"
        "  each:\n"
        "  bomb.json.gz: larger than 1 MiB once decompressed (--max-expanded-mib raises the limit)\n"
        f"  deep.json: {TOO_DEEP} ({DEEP_DETAIL})\n"
        f"mpg import: no telemetry was written to {out}; every rejected row is listed in {out / 'import_rejected.jsonl'}\n"
    )
    # The rejected rows alone: no stream folder, nothing `mpg run` would read.
    assert sorted(p.name for p in out.iterdir()) == ["import_rejected.jsonl"]
    assert len((out / "import_rejected.jsonl").read_text().splitlines()) == 2


def test_mpg_import_stops_on_a_single_input_nested_too_deep(tmp_path, capsys):
    source, out = tmp_path / "philly", tmp_path / "out"
    shutil.copytree(PUBLIC_DATA / "philly", source)
    (source / "jobs.json").write_text(DEEP)
    assert main(["import", "philly", str(source), "--out", str(out)]) == 1
    assert capsys.readouterr().err.endswith(
        f"mpg import: {source / 'jobs.json'}: {TOO_DEEP} ({DEEP_DETAIL})\nmpg import: nothing was written to {out}\n"
    )
    assert not out.exists()


# A pattern that backtracks for ever in Python's `re` (2^40 ways to split 40 a's), and the line that makes it.
CATASTROPHIC_PROFILE = "slow:\n  timestamp: '\\[(?P<time>[^]]+)\\]'\n  iteration: '(?P<step>a)(?P<ms>(?:a+)+)$'\n"


def test_log_patterns_match_in_linear_time_whatever_the_pattern_and_the_line(tmp_path):
    """RE2 matches in time linear in the line (fleet_goodput/importers/log_profiles.py): a user's `(a+)+$` on a
    40-character line, and a 2 MB line of repeated ` iteration 1/ 10 |` under the built-in Megatron pattern,
    end (Python's `re`: the first never, the second in minutes). Run in a process of its own, so a
    regression fails here at the time limit instead of hanging the suite; a test of ending, not of speed."""
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(CATASTROPHIC_PROFILE)
    slow_log = tmp_path / "slow.log"
    slow_log.write_text("[2026-01-01 00:00:00] " + "a" * 40 + "!\n")
    long_line = tmp_path / "long.log"
    long_line.write_text(" [2026-01-01 00:00:00] " + " iteration 1/ 10 |" * 120_000 + "\n")
    for log, flags in (
        (slow_log, ["--profiles", profiles, "--profile", "slow"]),
        (long_line, ["--profile", "megatron"]),
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fleet_goodput.cli",
                "import",
                "logs",
                str(log),
                *map(str, flags),
                "--job",
                "j",
                "--accelerator",
                "h100",
                "--chips",
                "8",
                "--out",
                str(tmp_path / log.stem),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1 and "nothing to import" in done.stderr, done.stderr[-500:]


def test_a_profile_with_lookaround_or_a_backreference_is_refused_naming_the_key(tmp_path):
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("la:\n  timestamp: '(?P<time>x)'\n  iteration: '(?<=it )(?P<step>\\d+) (?P<ms>\\d+)'\n")
    source = tmp_path / "run.log"
    source.write_text("x\n")
    with pytest.raises(
        UsageError,
        match=r"profile 'la': iteration is not a valid regular expression \(invalid "
        r"perl operator: \(\?<=; RE2 syntax: no lookaround or backreferences\)",
    ):
        import_to(
            "logs", source, tmp_path / "in", profile="la", profiles=profiles, job="j", accelerator="h100", chips=8
        )


@pytest.mark.parametrize("flag, value", [("--cluster", "gke\x1b[2J"), ("--cluster", "a" * 300), ("--job", "j\x00")])
def test_a_cluster_or_job_name_that_is_no_name_is_a_bad_argument(tmp_path, capsys, flag, value):
    """--cluster and --job name the telemetry every event carries: control characters or a runaway length are a
    bad argument (exit 2, the flag named), not names written into the store."""
    log = tmp_path / "run.log"
    log.write_text("x\n")
    argv = (
        ["import", "kubernetes", str(log), "--cluster", value]
        if flag == "--cluster"
        else ["import", "orbax", str(tmp_path), "--job", value]
    )
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert f"mpg import: {flag} must be a name of printable characters, at most 256" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
