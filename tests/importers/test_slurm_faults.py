"""Hostile Slurm accounting (issue 37): every bad row, node line or node event is one rejection with its
reason and line, the rest imported as if it were not there; ranges are counted before they are expanded;
impossible counts and control characters never reach the events; a damaged collector cursor is one line
naming it. The collector's timeout against a real Slurm that never answers is in tests/importers/test_slurm.py.
Each case's expected side is written by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleet_goodput.cli import main
from importing import by_job, import_to, rejected_rows
from test_slurm_import import HEADER, _row, _t, _write

FIELDS = HEADER.split("|")
NODES = "NodeName=n1 Gres=gpu:h100:8 Partitions=batch\nNodeName=n2 Gres=gpu:h100:8 Partitions=batch\n"
EVENTS_HEADER = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User|Event|TRES\n"
CONTROL = "a control character in a field the mapping reads"


def _with(row: str, **fields: str) -> str:
    """`row` (of `_row`, without a `|` in its SubmitLine) with some fields changed, by header name."""
    values = row.split("|")
    for name, value in fields.items():
        values[FIELDS.index(name)] = value
    return "|".join(values)


def _rejections(out) -> list[tuple[str, str, str, str]]:
    return sorted((r["file"], r["where"], r["item"], r["reason"]) for r in rejected_rows(out))


def _jobs(imported) -> set[str]:
    return {r["job_id"] for r in imported.streams["scheduler"] if r["job_id"]}


def test_a_bad_array_range_is_one_rejection_and_a_huge_one_is_never_expanded(tmp_path):
    """`..._[1-3,]` once ended the import (invalid literal for int()); a 200-byte `..._[0-99999999]` took
    5 GB before it was killed: now each is one rejection, found by reading the range's ends and counting,
    never expanding it (Slurm's task ids stop at 4,000,000; one row stands for at most 100,000 tasks)."""
    pending = dict(state="PENDING", start="Unknown", end="Unknown", alloc="")
    _write(
        tmp_path / "src",
        [
            _row("1"),
            _row("2_[1-3,]", **pending),  # line 3
            _row("3_[0-99999999]", **pending),  # line 4: 100,000,000 tasks
            _row("4_[5-2]", **pending),  # line 5: runs backwards
            _row("5_[0-4000001]", **pending),  # line 6: past Slurm's largest MaxArraySize
            _row("6_[0-2,7]", **pending),  # four tasks: imported
            _row("7_[0-3999999]", **pending),  # line 8: 4,000,000 tasks, each id one Slurm allows
        ],
    )
    imported, summary = import_to("slurm", tmp_path / "src", tmp_path / "out")
    assert _rejections(tmp_path / "out") == [
        ("sacct.txt", "line 3", "edge/2_[1-3,]", "array task range not understood"),
        ("sacct.txt", "line 4", "edge/3_[0-99999999]", "array task number past 4,000,000"),
        ("sacct.txt", "line 5", "edge/4_[5-2]", "array task range not understood"),
        ("sacct.txt", "line 6", "edge/5_[0-4000001]", "array task number past 4,000,000"),
        ("sacct.txt", "line 8", "edge/7_[0-3999999]", "more than 100,000 array tasks in one row"),
    ]
    assert _jobs(imported) == {"edge/1", "edge/6_0", "edge/6_1", "edge/6_2", "edge/6_7"}
    assert summary["jobs"] == 5


def test_a_bad_or_huge_node_range_is_one_rejection(tmp_path):
    """`gpu[a-b]` and `gpu[0-99999999]` as a job's NodeList (read at a node failure) and as a node event's
    NodeName: each a rejection with its line; the events that remain lower capacity as before."""
    _write(
        tmp_path / "src",
        [
            _row("1", submit="2026-03-01T10:00:00", end="2026-03-01T12:00:00"),
            _with(_row("2"), NodeList="gpu[a-b]"),  # line 3
            _with(_row("3"), NodeList="gpu[0-99999999]"),  # line 4
        ],
        nodes=NODES,
    )
    (tmp_path / "src" / "events.txt").write_text(
        EVENTS_HEADER
        + "edge|gpu[a-b]|2026-03-01T10:10:00|2026-03-01T10:20:00|DOWN|x|root(0)|Node|\n"
        + "edge|gpu[0-99999999]|2026-03-01T10:10:00|2026-03-01T10:20:00|DOWN|x|root(0)|Node|\n"
        + "edge|n[1-1]|2026-03-01T11:00:00|2026-03-01T11:30:00|DOWN|psu|root(0)|Node|\n"
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out")
    assert _rejections(tmp_path / "out") == [
        ("events.txt", "line 2", "gpu[a-b]", "node range not understood"),
        ("events.txt", "line 3", "gpu[0-99999999]", "more than 100,000 nodes in one row"),
        ("sacct.txt", "line 3", "edge/2", "node range not understood"),
        ("sacct.txt", "line 4", "edge/3", "more than 100,000 nodes in one row"),
    ]
    assert _jobs(imported) == {"edge/1"}
    levels = sorted((r["event_time"], r["chips"]) for r in imported.streams["scheduler"] if r["type"] == "CAPACITY")
    # 16 GPUs from the first submission; n1's 8 out from 11:00 to 11:30.
    assert levels == [(_t("2026-03-01T10:00:00"), 16), (_t("2026-03-01T11:00:00"), 8), (_t("2026-03-01T11:30:00"), 16)]


def test_a_submit_past_what_a_zone_can_convert_is_one_rejection(tmp_path):
    """9999-12-31 in America/New_York ended the import with an OverflowError (UTC is a year later)."""
    _write(
        tmp_path / "src",
        [
            _row("1", submit="2026-03-01T10:00:00", start="2026-03-01T10:00:05", end="2026-03-01T11:00:00"),
            _row("2", submit="9999-12-31T23:59:59", start="Unknown", end="Unknown", state="PENDING", alloc=""),
            _row("3", end="0001-01-01T00:00:00"),
            _row("4", end="9" * 5000),  # epoch seconds of 5,000 digits: int() refuses more than 4,300
        ],
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out", timezone="America/New_York")
    assert _rejections(tmp_path / "out") == [
        ("sacct.txt", "line 3", "edge/2", "Submit is not a time from 1970 up to 2100"),
        ("sacct.txt", "line 4", "edge/3", "End is not a time from 1970 up to 2100"),
        ("sacct.txt", "line 5", "edge/4", "End is not a time from 1970 up to 2100"),
    ]
    # 10:00 EST (UTC-5 in March before the 8th) is 15:00 UTC.
    assert by_job(imported, "scheduler", "edge/1")[0]["event_time"] == _t("2026-03-01T15:00:00")


def test_control_characters_reject_a_row_where_the_mapping_reads_them_and_are_dropped_elsewhere(tmp_path):
    """A State of `COMPLETED\\0` became a job that never ended, and NUL stayed in team and queue names.
    In a field the mapping reads, a control character rejects the row; in Reason (which only a reason
    quotes) it is dropped from the reason; in SubmitLine (never read) it stays in the file, unused."""
    _write(
        tmp_path / "src",
        [
            _row("1", state="COMPLETED\0"),  # line 2
            _row("2", account="te\0am"),  # line 3
            _row("3", partition="batch\x1b[31m"),  # line 4: a terminal escape
            _row("4", state="CANCELLED by 0", start="None", alloc="", reason="Job\0Held\x9bUser"),
            _row("5", submit_line="sbatch \x01run.sh"),
        ],
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out")
    assert _rejections(tmp_path / "out") == [
        ("sacct.txt", "line 2", "edge/1", CONTROL),
        ("sacct.txt", "line 3", "edge/2", CONTROL),
        ("sacct.txt", "line 4", "edge/3", CONTROL),
    ]
    assert [r["reason"] for r in by_job(imported, "scheduler", "edge/4")] == [
        None,
        "CANCELLED by 0 (never started: Job Held User)",
    ]
    assert [r["type"] for r in by_job(imported, "scheduler", "edge/5")] == ["SUBMIT", "ALLOCATE", "FINISH"]
    texts = [value for r in imported.streams["scheduler"] for value in r.values() if isinstance(value, str)]
    assert not any(ch < " " or "\x7f" <= ch <= "\x9f" for text in texts for ch in text)


def test_impossible_gpu_counts_never_reach_capacity(tmp_path):
    """`Gres=gpu:h100:99999999999` wrote a CAPACITY of 99,999,999,999 chips into an Avro int. A node
    with more than 1,024 GPUs of a type is rejected (its line); nodes that are each plausible but
    together hold more than 2**20 (1,048,576) GPUs of a type give no CAPACITY for it, one rejection."""
    many = "".join(f"NodeName=a{n} Gres=gpu:a100:1024 Partitions=batch\n" for n in range(1025))  # 1,049,600
    _write(
        tmp_path / "src",
        [_row("1", submit="2026-03-01T10:00:00", end="2026-03-01T12:00:00")],
        nodes=NODES
        + "NodeName=n3 Gres=gpu:h100:99999999999 Partitions=batch\n"
        + "NodeName=n4 Gres=gpu:h100:"
        + "9" * 5000
        + " Partitions=batch\n"
        + many,
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out")
    assert _rejections(tmp_path / "out") == [
        ("nodes.txt", "file", "capacity edge/a100", "nodes hold more than 1,048,576 GPUs of one type"),
        (
            "nodes.txt",
            "line 3",
            "NodeName=n3 Gres=gpu:h100:99999999999 Partitions=batch",
            "a node with more than 1,024 GPUs of a type",
        ),
        (
            "nodes.txt",
            "line 4",
            ("NodeName=n4 Gres=gpu:h100:" + "9" * 80)[:80],
            "a node with more than 1,024 GPUs of a type",
        ),
    ]
    levels = [(r["accelerator"], r["chips"]) for r in imported.streams["scheduler"] if r["type"] == "CAPACITY"]
    assert levels == [("h100", 16)]


def test_a_row_longer_than_the_limit_is_read_past_and_rejected_with_its_lines(tmp_path):
    """A row is held whole only up to 4 MiB: a longer SubmitLine, or one whose lines carry on past it,
    is one rejection with its line(s); the rows after it are read as usual."""
    long_line = "sbatch --wrap '" + "x" * (5 << 20) + "'"
    many_lines = "sbatch --wrap '" + "\n".join(["y" * 1000] * 5000) + "'"  # lines 4 to 5,003
    _write(
        tmp_path / "src", [_row("1"), _row("2", submit_line=long_line), _row("3", submit_line=many_lines), _row("4")]
    )
    imported, _ = import_to("slurm", tmp_path / "src", tmp_path / "out")
    assert _rejections(tmp_path / "out") == [
        ("sacct.txt", "line 3", "", "a row longer than 4 MiB"),
        ("sacct.txt", "lines 4-5003", "", "a row longer than 4 MiB"),
    ]
    assert _jobs(imported) == {"edge/1", "edge/4"}


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"{}", "no origin_us, since_us, polls, written, rejected"),
        (
            b'{"origin_us": null, "since_us": "2026-01-01", "polls": 0, "written": {}, "rejected": {}}',
            "since_us is str, not a whole number",
        ),
        (
            b'{"origin_us": 1, "since_us": 1, "polls": true, "written": {}, "rejected": {}}',
            "polls is bool, not a whole number",
        ),
        (
            b'{"origin_us": 1, "since_us": 1, "polls": 1, "written": {"a": "b"}, "rejected": {}}',
            "written maps to something other than whole numbers",
        ),
        (b"[1, 2]", "not a JSON object"),
        (
            b'{"origin_us": 1,',
            "not JSON (Expecting property name enclosed in double quotes: line 1 column 17 (char 16))",
        ),
        (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
    ],
)
def test_a_damaged_collector_cursor_is_one_line_naming_it_exit_2(tmp_path, capsys, content, problem):
    """The cursor is read before any Slurm command runs, so no Slurm is needed. Exit 2, as a settings file
    that cannot be read: only the operator can mend it (the same command again will not, and a new cursor
    made silently would forget what was written); not 1, a Slurm command that failed, which the next poll
    may get past; not 3, kept for a damaged output store. Nothing is written, the cursor left as it was."""
    cursor = tmp_path / "out" / ".slurm-collect" / "cursor.json"
    cursor.parent.mkdir(parents=True)
    cursor.write_bytes(content)
    assert main(["collect", "slurm", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"mpg collect: {cursor}: {problem}; it is the collector's cursor: restore it, or move it aside to collect "
        "again from --since (events already written keep their ids); nothing was written\n"
    )
    assert cursor.read_bytes() == content and not (tmp_path / "out" / "scheduler").exists()


def test_the_collectors_help_names_its_timeout_and_a_bad_one_is_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "--timeout SECONDS how long each Slurm command (sacct, sacctmgr, scontrol, squeue) may take" in helped
    assert "(default 120 s)" in helped and "1 a Slurm command failed" in helped
    assert "did not answer within --timeout" in helped
    assert main(["collect", "slurm", "--out", str(tmp_path / "o"), "--timeout", "0"]) == 2
    assert capsys.readouterr().err == "mpg collect: --timeout must be more than 0 and at most 86400 seconds, not 0\n"


def test_a_missing_slurm_client_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "fleet_goodput.cli", "collect", "slurm", "--out", str(tmp_path / "o")],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stderr) == (
        1,
        "mpg collect: sacct is not installed (the Slurm client tools are "
        f"needed); nothing was written to {tmp_path / 'o'}\n",
    )
    assert json.loads((tmp_path / "o" / ".slurm-collect" / "cursor.json").read_text())["polls"] == 0


@pytest.mark.parametrize(
    "name, content",
    [
        ("scheduler/slurm-000001.avro", b"Obj\x01" + b"\xff" * 64),  # an Avro header cut into garbage
        ("slurm_rejected/poll-000001.jsonl", b'{"item": "1", "reason"\n'),
    ],
    ids=["avro", "rejections"],
)
def test_a_damaged_file_of_an_interrupted_poll_is_one_line_naming_it_exit_2(tmp_path, capsys, name, content):
    """A poll killed after writing its files but before its cursor moved: the next poll reads them back. One
    damaged since (they are written whole, by a rename) is one line naming it, exit 2, before any Slurm command
    runs, never a traceback; nothing is written."""
    damaged = tmp_path / "out" / name
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(content)
    assert main(["collect", "slurm", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mpg collect: {damaged} cannot be read back (") and err.count("\n") == 1, err
    assert "move it aside and poll again" in err
    assert damaged.read_bytes() == content
