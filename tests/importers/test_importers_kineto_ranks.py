"""One job per distributed run from per-rank PyTorch profiler traces (issue 22): ranks 0 and 1
of one 128-GPU run once became two jobs of 128 chips each (twice the chip-time the run held).
Rank 1 is made from the real rank-0 trace of HolisticTraceAnalysis's test data (MIT) at test
time: the same steps on rank 1, its clock 1.5 ms behind, as another process of the run would
record them. Expected figures are read from the raw traces here."""

from __future__ import annotations

import gzip
import json

import pytest

from fleet_goodput.importers.common import SourceError
from importing import PUBLIC_DATA, import_to, run_and_read

RANK_0 = PUBLIC_DATA / "kineto" / "trace_filter__sampled_rank-0.json.gz"
SKEW_US = 1500


def rank_trace(rank: int, shift_us: float) -> dict:
    trace = json.loads(gzip.decompress(RANK_0.read_bytes()))
    trace["distributedInfo"]["rank"] = rank
    for event in trace["traceEvents"]:
        if isinstance(event.get("ts"), (int, float)) and event.get("ph") != "M":
            event["ts"] += shift_us
    return trace


def window_us(trace: dict) -> tuple[float, float]:
    events = [e for e in trace["traceEvents"] if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    return min(e["ts"] for e in events), max(e["ts"] + (e.get("dur") or 0) for e in events)


def write(folder, name: str, trace: dict) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(gzip.compress(json.dumps(trace).encode(), mtime=0))


def test_per_rank_traces_of_one_run_are_one_job_with_the_world_size_of_chips(tmp_path):
    ranks = {0: rank_trace(0, 0), 1: rank_trace(1, SKEW_US)}
    world_size = ranks[0]["distributedInfo"]["world_size"]
    assert world_size == 128
    first = min(window_us(t)[0] for t in ranks.values())
    last = max(window_us(t)[1] for t in ranks.values())
    write(tmp_path / "src", "trace_rank-0.json.gz", ranks[0])
    write(tmp_path / "src", "trace_rank-1.json.gz", ranks[1])
    imported, summary = import_to("kineto", tmp_path / "src", tmp_path / "in", accelerator="a100")
    assert summary["jobs"] == 1
    [submit] = [r for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"]
    assert (submit["job_id"], submit["chips"]) == ("trace_rank-0", 128)
    _, jobs = run_and_read(tmp_path / "in", tmp_path / "out")
    # The run held its 128 chips from the first instant any rank saw to the last: not 2 x 128.
    assert jobs["trace_rank-0"]["lifetime_chip_s"] == pytest.approx(
        world_size * (int(last) - int(first)) / 1e6, abs=world_size * 2e-6
    )
    ranks_by_job = json.loads((tmp_path / "in" / "SOURCE.json").read_text())["ranks_by_job"]
    assert ranks_by_job == {
        "trace_rank-0": {
            "world_size": 128,
            "ranks": [0, 1],
            "steps_from_rank": 0,
            "traces": ["trace_rank-0", "trace_rank-1"],
        }
    }


def test_the_order_ranks_arrive_in_changes_nothing(tmp_path):
    """Rank 1's file sorts first and its clock is ahead: the same job, the same bytes."""
    write(tmp_path / "a", "x_rank-0.json.gz", rank_trace(0, 0))
    write(tmp_path / "a", "y_rank-1.json.gz", rank_trace(1, -SKEW_US))
    write(tmp_path / "b", "y_rank-0.json.gz", rank_trace(0, 0))
    write(tmp_path / "b", "x_rank-1.json.gz", rank_trace(1, -SKEW_US))
    first, _ = import_to("kineto", tmp_path / "a", tmp_path / "a-in", accelerator="a100")
    second, _ = import_to("kineto", tmp_path / "b", tmp_path / "b-in", accelerator="a100")
    submits = [
        [(r["job_id"], r["chips"], r["event_time"]) for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"]
        for imported in (first, second)
    ]
    assert submits == [[("x_rank-0", 128, submits[0][0][2])], [("y_rank-0", 128, submits[0][0][2])]]
    times = [
        [(r["type"], r["event_time"], r["step"]) for r in imported.streams["runtime"]] for imported in (first, second)
    ]
    assert times[0] == times[1]  # the steps of rank 0, whichever name it has


def test_traces_that_name_their_job_merge_across_imports(tmp_path):
    """A trace that names its job (Meta's scheduler writes mast_job_name and mast_job_attempt into
    every rank's) gets that name as its job id, so ranks imported separately are one job."""
    ids = []
    for rank in (0, 1):
        trace = rank_trace(rank, rank * SKEW_US)
        trace.update(mast_job_name="llm-pretrain-7b", mast_job_attempt="2")
        write(tmp_path / f"rank{rank}", "trace.json.gz", trace)
        imported, _ = import_to("kineto", tmp_path / f"rank{rank}", tmp_path / f"in{rank}", accelerator="a100")
        ids += [r["job_id"] for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"]
    assert ids == ["llm-pretrain-7b.attempt-2", "llm-pretrain-7b.attempt-2"]


def test_two_runs_at_once_are_two_jobs(tmp_path):
    """Rank 0 of two different runs, profiled at the same time: one rank cannot be in a run twice."""
    write(tmp_path / "src", "run-a_rank-0.json.gz", rank_trace(0, 0))
    write(tmp_path / "src", "run-b_rank-0.json.gz", rank_trace(0, SKEW_US))
    _, summary = import_to("kineto", tmp_path / "src", tmp_path / "in", accelerator="a100")
    assert summary["jobs"] == 2


def test_job_flag_names_the_run_so_ranks_imported_apart_join_it(tmp_path):
    """Traces that do not name their job: --job gives every rank's import the same job id; a
    --job over traces of two runs is refused."""
    ids = []
    for rank in (1, 0):
        name = f"host{rank}_4242.1700000000000.pt.trace.json.gz"  # the profiler's default: host, pid, time
        write(tmp_path / f"rank{rank}", name, rank_trace(rank, rank * SKEW_US))
        imported, _ = import_to(
            "kineto", tmp_path / f"rank{rank}", tmp_path / f"in{rank}", accelerator="a100", job="resnet-run-17"
        )
        ids += [(r["job_id"], r["chips"]) for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"]
    assert ids == [("resnet-run-17", 128), ("resnet-run-17", 128)]
    write(tmp_path / "two", "a_rank-0.json.gz", rank_trace(0, 0))
    write(tmp_path / "two", "b_rank-0.json.gz", rank_trace(0, SKEW_US))
    with pytest.raises(SourceError, match="--job names one run, but the traces are 2 runs"):
        import_to("kineto", tmp_path / "two", tmp_path / "in-two", accelerator="a100", job="resnet-run-17")


def test_a_rank_without_a_world_size_takes_the_world_the_trace_shows(tmp_path):
    """distributedInfo with `rank` 5 and no `world_size` (once rejected whole, "rank is not a rank of the
    world"): the world is at least 6; where the trace lists a process group of ranks 0-15, 16."""
    trace = rank_trace(5, 0)
    del trace["distributedInfo"]["world_size"]
    start, end = window_us(trace)
    write(tmp_path / "a", "rank-5.json.gz", trace)
    imported, summary = import_to("kineto", tmp_path / "a", tmp_path / "in-a", accelerator="a100")
    assert summary["rejected"] == {}
    [submit] = [r for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"]
    assert submit["chips"] == 6
    assert [(c.file, c.detail) for c in imported.caveats if c.caveat.startswith("distributedInfo gives a rank")] == [
        ("rank-5.json.gz", "rank 5, world size 6")
    ]
    _, jobs = run_and_read(tmp_path / "in-a", tmp_path / "out-a")
    assert jobs["rank-5"]["lifetime_chip_s"] == pytest.approx(6 * (int(end) - int(start)) / 1e6, abs=6e-6)

    trace["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 16, "ranks": list(range(16))}
    ]
    write(tmp_path / "b", "rank-5.json.gz", trace)
    imported, _ = import_to("kineto", tmp_path / "b", tmp_path / "in-b", accelerator="a100")
    assert [r["chips"] for r in imported.streams["scheduler"] if r["type"] == "SUBMIT"] == [16]
