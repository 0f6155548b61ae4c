"""PyTorch profiler (Kineto) Chrome traces → one job per trace, with measured steps.

SOURCE is a trace file (`*.json` or `*.json.gz`) or a folder of them. Per trace:

    scheduler  SUBMIT + ALLOCATE at the trace's first timestamp, FINISH at its last
               (the profiled window; metadata events, often at ts 0, do not count);
               chips = distributedInfo.world_size, else 1;
               accelerator from deviceProperties of the device the kernels ran on
    runtime    STEP_START/STEP_END step N around every `ProfilerStep#N` (CPU side)
    profiler   a sample per step only when the trace carries FLOP counts
               (recorded with with_flops=True: `flops` on operator events), as the
               step's summed operator FLOPs × world_size, source EXECUTED

A trace is one rank: the job's other ranks are assumed to run the same steps.
A CPU-only trace (no GPU kernel, memcpy or memset event) is rejected: it has no
accelerator time to measure, and the contract has no CPU accelerator.
The samples here carry no FLOP counts, so they give no profiler sample and PG
stays unknown (the profiler schema needs ideal_flops > 0). See docs/importers.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from fleet_goodput.importers.common import (
    Imported, JobEmitter, Options, Refused, SourceError, Unmappable, chip_count, event_time_us, file_digest,
    load_json, progress,
)

NAME = "kineto"
HELP = "PyTorch profiler (Kineto) Chrome traces (*.json[.gz]) → scheduler, runtime and profiler events"
PREFIX = "kineto"
CLUSTER = "kineto"
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
METADATA_PHASE = "M"
# Event categories of work on the GPU itself; a trace with none of them ran on the CPU only.
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# deviceProperties names → catalogue keys; the first pattern that matches wins.
DEVICE_PATTERNS = ((r"A100", "a100"), (r"H100", "h100"), (r"H200", "h200"), (r"V100", "v100"),
                   (r"MI250", "mi250-gcd"), (r"MI300X", "mi300x"))

PROVENANCE = {
    "source": "PyTorch profiler traces from the test data of facebookresearch/HolisticTraceAnalysis",
    "licence": "MIT",
    "citation": "facebookresearch/HolisticTraceAnalysis test traces",
    "mapping": [
        "one trace = one TRAINING job; SUBMIT and ALLOCATE at the trace's first timestamp, FINISH at its last",
        "chips = distributedInfo.world_size (1 when absent); accelerator from the deviceProperties of the "
        "device the kernels ran on (or --accelerator when the trace has none)",
        "STEP span per ProfilerStep#N (CPU-side user_annotation), step N",
        "profiler sample per step only when operator events carry `flops` (with_flops=True): "
        "sum over the step x world_size, flops_source EXECUTED",
        "timestamps are µs since the epoch, plus baseTimeNanoseconds when the trace has it; metadata events "
        "(ph M, often at ts 0) do not bound the job",
        "a trace without GPU kernel, memcpy or memset events (CPU-only) is rejected, --accelerator or not",
    ],
    "cannot_tell": [
        "anything outside the profiled window: queueing, init, checkpoints; SG and RG describe the window only",
        "other ranks: a trace is one rank, assumed representative of all world_size ranks",
        "FLOPs when the trace was recorded without with_flops: no profiler sample, PG unknown",
        "AMD MI250 reports each GCD as a device named 'AMD Radeon Graphics'; it is recognised by "
        "gfx9.0 with 104 compute units and 64 GiB",
    ],
}


def _device_key(device: dict) -> str | None:
    name = str(device.get("name", ""))
    for pattern, key in DEVICE_PATTERNS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return key
    # ROCm names every MI250 GCD "AMD Radeon Graphics": gfx90a (9.0), 104 CUs, 64 GiB HBM.
    if (name.startswith("AMD") and device.get("computeMajor") == 9 and device.get("computeMinor") == 0
            and device.get("numSms") == 104 and round(device.get("totalGlobalMem", 0) / 2**30) == 64):
        return "mi250-gcd"
    return None


def _load(path: Path, limit: int) -> dict:
    trace = load_json(path, limit)
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise SourceError(path, None, "not a Chrome trace: no traceEvents list")
    return trace


def _accelerator(trace: dict, options: Options) -> str:
    devices = {d.get("id"): d for d in trace.get("deviceProperties") or [] if isinstance(d, dict)}
    kernel_devices = sorted({(e.get("args") or {}).get("device") for e in trace["traceEvents"]
                             if isinstance(e, dict) and e.get("cat") == "kernel"} - {None})
    keys = {_device_key(devices[d]) for d in kernel_devices if d in devices}
    if not devices:
        if options.accelerator:
            return options.accelerator
        raise Unmappable("no deviceProperties: the accelerator is unknown (pass --accelerator KEY)")
    if not keys:
        keys = {_device_key(d) for d in devices.values()}
    if len(keys) != 1 or None in keys:
        raise Unmappable("device not recognised as one catalogue accelerator",
                         ", ".join(sorted({str(d.get('name')) for d in devices.values()})))
    return keys.pop()


def _import_trace(imported: Imported, path: Path, options: Options) -> None:
    trace = _load(path, options.max_expanded_bytes)
    # Metadata events (ph "M": process and thread names) carry ts = 0 on a trace
    # whose clock is relative (baseTimeNanoseconds): they are no activity and
    # would stretch the job back to the clock's zero.
    events = [e for e in trace["traceEvents"] if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))
              and e.get("ph") != METADATA_PHASE]
    steps = sorted((int(match.group(1)), e) for e in events
                   if e.get("cat") == "user_annotation" and (match := STEP_NAME.match(str(e.get("name", "")))))
    if not steps:
        raise Unmappable("no ProfilerStep#N annotations: no step to map")
    if not any(e.get("cat") in GPU_CATEGORIES for e in events):
        raise Unmappable("CPU-only trace: no GPU kernel, memcpy or memset events, so no accelerator time to measure",
                         f"world_size {(trace.get('distributedInfo') or {}).get('world_size', 1)}")
    accelerator = _accelerator(trace, options)
    if accelerator not in options.accelerators:
        raise Unmappable("accelerator not in the catalogue", accelerator)
    base_ns = trace.get("baseTimeNanoseconds") or 0
    if isinstance(base_ns, bool) or not isinstance(base_ns, int):
        raise Unmappable("baseTimeNanoseconds is not a whole number", repr(base_ns)[:40])
    base_us = base_ns // 1000

    def at(ts: float) -> int:
        """µs of the trace clock → µs since the epoch."""
        return base_us + int(ts)

    chips = chip_count((trace.get("distributedInfo") or {}).get("world_size") or 1, "distributedInfo.world_size")
    if any(not isinstance(e.get("dur", 0), (int, float)) for e in events):
        raise Unmappable("an event whose dur is not a number")
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + (e.get("dur") or 0) for e in events)
    # Every time the job emits lies in [start, end]: both in range, all are.
    event_time_us(base_us + start, "the trace's first timestamp")
    event_time_us(base_us + end, "the trace's last timestamp")
    job_id = path.name.removesuffix(".gz").removesuffix(".json")
    emit = JobEmitter(imported, PREFIX, job_id, options.cluster or CLUSTER, accelerator)
    emit.scheduler("SUBMIT", at(start), chips, workload="TRAINING", framework="pytorch")
    emit.scheduler("ALLOCATE", at(start), chips)
    flop_events = [e for e in events if isinstance((e.get("args") or {}).get("flops"), (int, float))]
    for number, step in steps:
        step_start, step_end = step["ts"], step["ts"] + (step.get("dur") or 0)
        emit.span("STEP", at(step_start), at(step_end), number, number)
        flops = sum(e["args"]["flops"] for e in flop_events if step_start <= e["ts"] < step_end)
        if flops > 0 and step_end > step_start:
            emit.profile(at(step_end), number, (step_end - step_start) / 1e6, chips, flops * chips, "EXECUTED")
    emit.scheduler("FINISH", at(end), 0)


def read(source: Path, options: Options) -> Imported:
    if source.is_dir():
        paths = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
    elif source.is_file():
        paths = [source]
    else:
        raise SourceError(source, None, "no such file or folder")
    if not paths:
        raise SourceError(source, None, "no Kineto traces (*.json, *.json.gz)")
    if options.limit is not None:
        paths = paths[:options.limit]
    imported = Imported(NAME)
    imported.provenance = {**PROVENANCE, "inputs": [file_digest(p) for p in paths]}
    for path in progress(paths, "kineto traces", unit="trace"):
        try:
            _import_trace(imported, path, options)
        except (Unmappable, Refused) as exc:  # this trace only; the others are imported
            imported.reject(path.name, "file", path.name, exc.reason, exc.detail)
    return imported
