"""PyTorch profiler (Kineto) Chrome traces → one job per run, with measured steps.

SOURCE is a trace file (`*.json` or `*.json.gz`) or a folder of them. A trace is one
rank of a run. The traces of one distributed run (the same world_size, backend,
accelerator and, where the trace names it, job; windows that overlap; each rank once)
are one job, whatever files arrive and in whatever order. Per run:

    scheduler  SUBMIT + ALLOCATE at the first timestamp of any of its traces, FINISH at
               the last (the profiled window; metadata events, often at ts 0, do not
               count); chips = distributedInfo.world_size, else (a rank without it) the
               world its rank and process groups show, with a caveat, else 1; accelerator from
               deviceProperties of the device the kernels ran on, through the
               catalogue's part `names`
    runtime    STEP_START/STEP_END step N around every `ProfilerStep#N` (CPU side) of
               its lowest rank present
    profiler   a sample per step only when the trace carries FLOP counts
               (recorded with with_flops=True: `flops` on operator events), as the
               step's summed operator FLOPs × world_size, source EXECUTED

The job id is --job ID where given, else the job the trace names (Meta's scheduler
writes `mast_job_name` and `mast_job_attempt` into every rank's trace): either way the
same for every rank, so ranks imported separately are one job; else the lowest rank's
file name, so a run's ranks must be imported together. The
ranks not present are assumed to run the steps of the lowest rank present.
A CPU-only trace (no GPU kernel, memcpy or memset event) is rejected: it has no
accelerator time to measure, and the contract has no CPU accelerator.
The samples here carry no FLOP counts, so they give no profiler sample and PG
stays unknown (the profiler schema needs ideal_flops > 0). See docs/importers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput.core.config import part_key
from fleet_goodput.importers.common import Imported, JobEmitter, Options, Refused, SourceError, Unmappable
from fleet_goodput.importers.reading import chip_count, event_time_us, file_digest, load_json, progress

NAME = "kineto"
HELP = (
    "PyTorch profiler (Kineto) Chrome traces (*.json[.gz]; a run's ranks are one job) → scheduler, runtime "
    "and profiler events"
)
PREFIX = "kineto"
CLUSTER = "kineto"
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
METADATA_PHASE = "M"
# Event categories of work on the GPU itself; a trace with none of them ran on the CPU only.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# An MI250 is two GCDs, each its own PyTorch device: its traces are per GCD (catalogue key
# mi250-gcd), whatever the name; other devices map through the catalogue's part `names`.
MI250 = re.compile(r"MI250", re.IGNORECASE)

PROVENANCE = {
    "source": "PyTorch profiler traces from the test data of facebookresearch/HolisticTraceAnalysis",
    "licence": "MIT",
    "citation": "facebookresearch/HolisticTraceAnalysis test traces",
    "mapping": [
        "one run = one TRAINING job: the traces with the same world_size, backend, accelerator and named job "
        "(mast_job_name), overlapping windows and distinct ranks; SUBMIT and ALLOCATE at their first timestamp, "
        "FINISH at their last",
        "job id: --job where given, else mast_job_name.attempt-<mast_job_attempt> where the trace names its job, "
        "else the lowest rank's file name",
        "chips = distributedInfo.world_size (where a rank comes without it: the world its rank and process groups "
        "show, with a caveat; 1 when neither); accelerator from the deviceProperties of the "
        "device the kernels ran on, through the catalogue's part names (or --accelerator when the trace has none)",
        "STEP span per ProfilerStep#N (CPU-side user_annotation) of the run's lowest rank present, step N",
        "profiler sample per step only when operator events carry `flops` (with_flops=True): "
        "sum over the step x world_size, flops_source EXECUTED",
        "timestamps are µs since the epoch, plus baseTimeNanoseconds when the trace has it; metadata events "
        "(ph M, often at ts 0) do not bound the job",
        "a trace without GPU kernel, memcpy or memset events (CPU-only) is rejected, --accelerator or not",
    ],
    "cannot_tell": [
        "anything outside the profiled window: queueing, init, checkpoints; SG and RG describe the window only",
        "ranks without a trace: assumed to run the steps of the lowest rank present (SOURCE.json ranks_by_job "
        "lists the ranks each job was built from)",
        "a run's ranks imported in separate imports are one job only when the traces name their job or --job does",
        "FLOPs when the trace was recorded without with_flops: no profiler sample, PG unknown",
        "AMD MI250 reports each GCD as a device named 'AMD Radeon Graphics'; it is recognised by "
        "gfx9.0 with 104 compute units and 64 GiB",
    ],
}


def _device_key(device: dict, options: Options) -> str | None:
    name = str(device.get("name", ""))
    if MI250.search(name):
        return "mi250-gcd"
    if (key := part_key(options.part_names, name)) is not None:
        return key
    # ROCm names every MI250 GCD "AMD Radeon Graphics": gfx90a (9.0), 104 CUs, 64 GiB HBM.
    if (
        name.startswith("AMD")
        and device.get("computeMajor") == 9
        and device.get("computeMinor") == 0
        and device.get("numSms") == 104
        and round(device.get("totalGlobalMem", 0) / 2**30) == 64
    ):
        return "mi250-gcd"
    return None


def _load(path: Path, limit: int) -> dict:
    trace = load_json(path, limit)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise SourceError(path, None, "not a Chrome trace: no traceEvents list")
    return trace


def _accelerator(trace: dict, options: Options) -> str:
    devices = {d.get("id"): d for d in trace.get("deviceProperties") or [] if isinstance(d, dict)}
    kernel_devices = sorted(
        {
            (e.get("args") or {}).get("device")
            for e in trace["traceEvents"]
            if isinstance(e, dict) and e.get("cat") == "kernel"
        }
        - {None}
    )
    keys = {_device_key(devices[d], options) for d in kernel_devices if d in devices}
    if not devices:
        if options.accelerator:
            return options.accelerator
        raise Unmappable("no deviceProperties: the accelerator is unknown (pass --accelerator KEY)")
    if not keys:
        keys = {_device_key(d, options) for d in devices.values()}
    if len(keys) != 1 or None in keys:
        raise Unmappable(
            "device not recognised as one catalogue accelerator",
            ", ".join(sorted({str(d.get("name")) for d in devices.values()})),
        )
    return keys.pop()


@dataclass(frozen=True)
class _Trace:
    """What one rank's trace says of its run."""

    name: str  # the file's name without .json[.gz]
    rank: int
    world_size: int
    run_name: str | None  # the job the trace names itself (Meta's `mast_job_name`), if any
    backend: str | None
    accelerator: str
    start: int  # µs since the epoch: the first and last instants of the profiled window
    end: int
    steps: tuple[tuple[int, int, int, float], ...]  # (step, start µs, end µs, operator FLOPs on this rank)
    world_from_ranks: str | None = None  # the file, where distributedInfo gives a rank but no world_size

    @property
    def run_key(self) -> tuple:
        """What every rank of one run shares; traces that differ in it are never one run."""
        return self.run_name, self.world_size, self.backend, self.accelerator


def _read_trace(path: Path, options: Options) -> _Trace:
    trace = _load(path, options.max_expanded_bytes)
    # Metadata events (ph "M": process and thread names) carry ts = 0 on a trace
    # whose clock is relative (baseTimeNanoseconds): they are no activity and
    # would stretch the job back to the clock's zero.
    events = [
        e
        for e in trace["traceEvents"]
        if isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and e.get("ph") != METADATA_PHASE
    ]
    steps = sorted(
        (int(match.group(1)), e)
        for e in events
        if e.get("cat") == "user_annotation" and (match := STEP_NAME.match(str(e.get("name", ""))))
    )
    if not steps:
        raise Unmappable("no ProfilerStep#N annotations: no step to map")
    distributed = trace.get("distributedInfo") or {}
    if not any(e.get("cat") in GPU_CATEGORIES for e in events):
        raise Unmappable(
            "CPU-only trace: no GPU kernel, memcpy or memset events, so no accelerator time to measure",
            f"world_size {distributed.get('world_size', 1)}",
        )
    accelerator = _accelerator(trace, options)
    if accelerator not in options.accelerators:
        raise Unmappable("accelerator not in the catalogue", accelerator)
    base_ns = trace.get("baseTimeNanoseconds") or 0
    if isinstance(base_ns, bool) or not isinstance(base_ns, int):
        raise Unmappable("baseTimeNanoseconds is not a whole number", repr(base_ns)[:40])
    base_us = base_ns // 1000
    rank = distributed.get("rank") or 0
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise Unmappable("distributedInfo.rank is not a rank of the world", f"rank {rank!r}")
    world_shown = None
    if distributed.get("world_size") is None and "rank" in distributed:
        world_shown = _world_shown(distributed, rank)
    world_size = chip_count(world_shown or distributed.get("world_size") or 1, "distributedInfo.world_size")
    if not rank < world_size:
        raise Unmappable("distributedInfo.rank is not a rank of the world", f"rank {rank!r} of {world_size}")
    if any(not isinstance(e.get("dur", 0), (int, float)) for e in events):
        raise Unmappable("an event whose dur is not a number")
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + (e.get("dur") or 0) for e in events)
    # Every time the job emits lies in [start, end]: both in range, all are.
    event_time_us(base_us + start, "the trace's first timestamp")
    event_time_us(base_us + end, "the trace's last timestamp")
    flop_events = [e for e in events if isinstance((e.get("args") or {}).get("flops"), (int, float))]
    spans = []
    for number, step in steps:
        step_start, step_end = step["ts"], step["ts"] + (step.get("dur") or 0)
        flops = sum(e["args"]["flops"] for e in flop_events if step_start <= e["ts"] < step_end)
        spans.append((number, base_us + int(step_start), base_us + int(step_end), flops))
    return _Trace(
        path.name.removesuffix(".gz").removesuffix(".json"),
        rank,
        world_size,
        _run_name(trace),
        distributed.get("backend"),
        accelerator,
        base_us + int(start),
        base_us + int(end),
        tuple(spans),
        path.name if world_shown is not None else None,
    )


def _world_shown(distributed: dict, rank: int) -> int:
    """The world size a trace without `world_size` shows: past its own rank and the ranks (and
    sizes) of the process groups it lists in `pg_config`; a lower bound of the true one."""
    shown = rank + 1
    for group in distributed.get("pg_config") or []:
        if not isinstance(group, dict):
            continue
        ranks = [r for r in group.get("ranks") or [] if isinstance(r, int) and not isinstance(r, bool)]
        size = group.get("pg_size")
        shown = max(
            shown, max(ranks, default=-1) + 1, size if isinstance(size, int) and not isinstance(size, bool) else 0
        )
    return shown


def _run_name(trace: dict) -> str | None:
    """The job a trace names itself, the same on every rank: Meta's scheduler (MAST) writes
    `mast_job_name` and `mast_job_attempt` into each rank's trace."""
    name = trace.get("mast_job_name")
    if not isinstance(name, str) or not name:
        return None
    attempt = trace.get("mast_job_attempt")
    return f"{name}.attempt-{attempt}" if isinstance(attempt, (str, int)) and str(attempt) else name


def _runs(traces: list[_Trace]) -> list[list[_Trace]]:
    """The traces grouped into runs: ranks of one run share its world size, backend, accelerator
    and the job the trace names (if any), and are profiled at the same time, so their windows
    overlap; no run holds one rank twice. Grouping sorts first, so the order the files come
    in changes nothing."""
    runs: list[list[_Trace]] = []
    for trace in sorted(traces, key=lambda t: (t.start, t.rank, t.name)):
        run = next(
            (
                r
                for r in runs
                if trace.world_size > 1
                and r[0].run_key == trace.run_key
                and all(t.rank != trace.rank for t in r)
                and trace.start <= max(t.end for t in r)
                and min(t.start for t in r) <= trace.end
            ),
            None,
        )
        if run is None:
            runs.append([trace])
        else:
            run.append(trace)
    return runs


def _import_run(imported: Imported, run: list[_Trace], options: Options) -> None:
    """One job for the run: the world size of chips, from the first instant any rank's trace
    saw to the last; the steps are those of its lowest rank present."""
    reference = min(run, key=lambda t: t.rank)
    job_id = options.job or reference.run_name or reference.name
    if any(r["job_id"] == job_id for r in imported.streams["scheduler"]):  # a second run of that name
        job_id = reference.name
    chips = reference.world_size
    emit = JobEmitter(imported, PREFIX, job_id, options.cluster or CLUSTER, reference.accelerator)
    start, end = min(t.start for t in run), max(t.end for t in run)
    emit.scheduler("SUBMIT", start, chips, workload="TRAINING", framework="pytorch")
    emit.scheduler("ALLOCATE", start, chips)
    for number, step_start, step_end, flops in reference.steps:
        emit.span("STEP", step_start, step_end, number, number)
        if flops > 0 and step_end > step_start:
            emit.profile(step_end, number, (step_end - step_start) / 1e6, chips, flops * chips, "EXECUTED")
    emit.scheduler("FINISH", end, 0)
    for trace in run:
        if trace.world_from_ranks:
            imported.caveat(
                trace.world_from_ranks,
                job_id,
                "distributedInfo gives a rank but no world_size: the "
                "world size is taken from the ranks the trace shows (a lower bound: chips, and FLOPs "
                "x world size, may be understated)",
                f"rank {trace.rank}, world size {trace.world_size}",
            )
    if chips > 1:
        imported.provenance.setdefault("ranks_by_job", {})[job_id] = {
            "world_size": chips,
            "ranks": sorted(t.rank for t in run),
            "traces": sorted(t.name for t in run),
            "steps_from_rank": reference.rank,
        }


def read(source: Path, options: Options) -> Imported:
    if source.is_dir():
        paths = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
    elif source.is_file():
        paths = [source]
    else:
        raise SourceError(source, None, "no such file or folder")
    if not paths:
        raise SourceError(source, None, "no Kineto traces (*.json, *.json.gz)")
    imported = Imported(NAME)
    if options.limit is not None:
        for path in paths[options.limit :]:  # not imported, so on record
            imported.reject(path.name, "file", path.name, f"beyond --limit {options.limit}: not read")
        paths = paths[: options.limit]
    imported.provenance = {**PROVENANCE, "inputs": [file_digest(p) for p in paths]}
    traces = []
    for path in progress(paths, "kineto traces", unit="trace"):
        try:
            traces.append(_read_trace(path, options))
        except (Unmappable, Refused) as exc:  # this trace only; the others are imported
            imported.reject(path.name, "file", path.name, exc.reason, exc.detail)
    runs = _runs(traces)
    if options.job and len(runs) > 1:
        raise SourceError(
            source,
            None,
            f"--job names one run, but the traces are {len(runs)} runs (a rank twice, "
            "or windows that do not overlap): import each run with its own --job",
        )
    for run in runs:
        _import_run(imported, run, options)
    return imported
