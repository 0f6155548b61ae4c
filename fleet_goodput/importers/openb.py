"""Alibaba GPU cluster trace (openb, cluster-trace-gpu-v2023) → scheduler events.

SOURCE is a folder with `openb_pod_list_default.csv` (pods: creation,
scheduled and deletion seconds from the trace start, pod_phase, num_gpu,
gpu_milli, gpu_spec, qos) and `openb_node_list_gpu_node.csv` (GPU nodes and
their GPU model), or a pod list file (any of the trace's `openb_pod_list_*.csv`)
with the node list beside it. The mapping, per pod with num_gpu > 0:

    SUBMIT    at creation_time, chips = num_gpu, priority from qos, topology
              `gpu:<catalogue keys>` from gpu_spec (the models the pod may run on)
    ALLOCATE  at scheduled_time, chips = num_gpu (a fractional share counts as the whole GPU)
    FINISH    at deletion_time when Succeeded, FAIL when Failed,
    CANCEL    when Running or Pending and deleted before the trace's last instant;
              a Running pod deleted at that last instant is still running (no end event)

and one CAPACITY level (Σ GPUs of all GPU nodes) at the trace start. Times are
offsets from a trace start the source does not give; it is fixed at
2023-01-01T00:00:00Z unless --start says otherwise. See docs/importers.md.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from fleet_goodput.core.timeutil import format_time_us, parse_time_us
from fleet_goodput.importers.common import Imported, JobEmitter, Options, SourceError, Unmappable, capacity
from fleet_goodput.importers.reading import (
    LATEST_US,
    MAX_CHIPS,
    MICROS,
    chip_count,
    file_digest,
    progress,
    require_file,
)

NAME = "openb"
HELP = "Alibaba openb GPU pod trace (pod list + GPU node list CSVs) → scheduler events"
CLUSTER = "openb"
# The trace does not say which node ran a pod, and pods without a gpu_spec may
# run on any, so the cluster's GPUs are one pool (a pod's gpu_spec becomes its topology).
ACCELERATOR = "openb-gpu"
PREFIX = "openb"
DEFAULT_START = "2023-01-01T00:00:00Z"
POD_FILE, NODE_FILE = "openb_pod_list_default.csv", "openb_node_list_gpu_node.csv"
POD_COLUMNS = ("name", "num_gpu", "gpu_milli", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
NODE_COLUMNS = ("sn", "gpu", "model")
# Kubernetes QoS classes as a priority, highest first; segments by priority then split by QoS.
PRIORITY = {"Guaranteed": 3, "LS": 2, "Burstable": 1, "BE": 0}
# GPU models of the trace (`gpu_spec` of pods, `model` of nodes) → catalogue keys.
# G1, G2 and G3 are undisclosed internal codes (UPSTREAM_README.md): no key.
GPU_MODELS = {"P100": "p100", "T4": "t4", "V100M16": "v100", "V100M32": "v100", "A10": "a10"}
NO_CONSTRAINT = ("", "nan")
# An offset past this is no time of the trace (and could pass what an Avro long holds).
MAX_OFFSET_S = LATEST_US // MICROS

PROVENANCE = {
    "source": "Alibaba cluster-trace-gpu-v2023 (openb), alibaba/clusterdata",
    "licence": "research and study use (see openb/UPSTREAM_README.md of the sample)",
    "citation": "Weng et al., Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation "
    "Gradient Descent, USENIX ATC'23",
    "mapping": [
        "SUBMIT at creation_time, chips = num_gpu; priority from qos (Guaranteed 3, LS 2, Burstable 1, BE 0)",
        "ALLOCATE chips = num_gpu at scheduled_time; a pod with gpu_milli < 1000 holds a share of one GPU and "
        "counts as holding the whole GPU",
        "Succeeded -> FINISH, Failed -> FAIL at deletion_time; Running or Pending deleted before the trace's last "
        "instant -> CANCEL; Running at the last instant -> no end event (running at the as-of time)",
        "CAPACITY: one level = sum of GPUs over all GPU nodes, at the trace start, restated at its last instant",
        "pods with num_gpu = 0 are CPU-only and rejected",
        "gpu_spec (e.g. V100M16|V100M32) -> SUBMIT topology `gpu:<catalogue keys>` (gpu:v100); P100 p100, T4 t4, "
        "V100M16/V100M32 v100, A10 a10; undisclosed G1/G2/G3 kept as written, with a caveat",
    ],
    "cannot_tell": [
        "the trace start date (times are offsets): a fixed date is assumed",
        "which GPU model (node) a pod ran on: one pooled accelerator key for capacity and every pod, since pods "
        "without a gpu_spec may run on any node; a pod's gpu_spec (the models it may run on) is mapped to "
        "catalogue keys and kept as its topology `gpu:<keys>`; undisclosed models (G1, G2, G3) are not mapped "
        "and are counted in SOURCE.json and the caveats",
        "no runtime stream: all-allocated time is unmeasured, and RG, PG and MPG are unknown",
        "whether a pod deleted while Running was stopped by its owner or by the system",
        "GPU sharing: a fractional pod counts as a whole GPU, so held GPU-time and capacity-base SG are upper "
        "bounds and can exceed what was really used",
    ],
}


def _csv_rows(path: Path, columns: tuple[str, ...]):
    """(line number, row dict) for every data row; a row with the wrong field count is corruption."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise SourceError(path, "line 1", "empty file: no header")
        missing = [column for column in columns if column not in header]
        if missing:
            raise SourceError(path, "line 1", f"header lacks column(s) {', '.join(missing)}")
        try:
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise SourceError(
                        path,
                        f"line {reader.line_num}",
                        f"{len(row)} fields where the header has {len(header)}; is the file truncated?",
                    )
                yield reader.line_num, dict(zip(header, row))
        except csv.Error as exc:
            raise SourceError(path, f"line {reader.line_num}", f"not valid CSV ({exc})") from exc
        except UnicodeDecodeError as exc:
            raise SourceError(path, None, f"not UTF-8 text at byte {exc.start}") from exc


def _gpus_by_model(path: Path) -> dict[str, int]:
    gpus: dict[str, int] = {}
    for line, row in _csv_rows(path, NODE_COLUMNS):
        try:
            count = int(row["gpu"])
        except ValueError as exc:
            raise SourceError(path, f"line {line}", f"gpu count {row['gpu']!r} is not an integer") from exc
        if count > 0:
            gpus[row["model"]] = gpus.get(row["model"], 0) + count
    if not gpus:
        raise SourceError(path, None, "no GPU nodes listed")
    if sum(gpus.values()) > MAX_CHIPS:
        raise SourceError(
            path, None, f"{sum(gpus.values()):,} GPUs in all: more than the {MAX_CHIPS:,} chips an event can hold"
        )
    return dict(sorted(gpus.items()))


def _seconds(row: dict, column: str, required: bool = True) -> int | None:
    text = row[column].strip()
    if not text:
        if required:
            raise Unmappable(f"no {column}")
        return None
    try:
        value = int(text)
    except ValueError as exc:
        raise Unmappable(f"{column} is not an integer number of seconds", repr(text)) from exc
    if value < 0:
        raise Unmappable(f"negative {column}", text)
    if value >= MAX_OFFSET_S:
        raise Unmappable(f"{column} is more seconds than from 1970 to 2100", text)
    return value


def _last_instant(rows: list[tuple[int, dict]]) -> int:
    """The trace's last instant: the latest deletion_time that is a time at all (a pod whose
    deletion_time is not is rejected on its own line)."""
    offsets = (row["deletion_time"].strip() for _, row in rows)
    return max(
        (int(text) for text in offsets if text.isdigit() and len(text) < 20 and int(text) < MAX_OFFSET_S), default=0
    )  # 20 digits are past any offset: no need to read a longer one


def _pod(row: dict) -> tuple[int, int, int | None, int]:
    """(num_gpu, creation s, scheduled s or None, deletion s), checked."""
    try:
        num_gpu = int(row["num_gpu"])
    except ValueError as exc:
        raise Unmappable("num_gpu is not an integer", repr(row["num_gpu"])) from exc
    if num_gpu == 0:
        raise Unmappable("CPU-only pod (num_gpu = 0): no accelerator demand")
    if num_gpu < 0:
        raise Unmappable("negative num_gpu")
    chip_count(num_gpu, "num_gpu")
    created, scheduled, deleted = (
        _seconds(row, "creation_time"),
        _seconds(row, "scheduled_time", required=False),
        _seconds(row, "deletion_time"),
    )
    phase = row["pod_phase"]
    if phase not in ("Succeeded", "Failed", "Running", "Pending"):
        raise Unmappable("unknown pod_phase", phase)
    if phase != "Pending" and scheduled is None:
        raise Unmappable(f"{phase} pod without a scheduled_time")
    if scheduled is not None and not created <= scheduled <= deleted:
        raise Unmappable("times out of order (creation <= scheduled <= deletion)")
    if deleted < created:
        raise Unmappable("deleted before it was created")
    return num_gpu, created, scheduled, deleted


def gpu_constraint(spec: str) -> tuple[str | None, list[str]]:
    """(topology `gpu:<keys>` for a pod's gpu_spec, or None without one; the models with no catalogue key).

    `V100M16|V100M32` lists the models a pod may run on; their keys are
    deduplicated and sorted, so it maps to `gpu:v100`."""
    spec = spec.strip()
    if spec.lower() in NO_CONSTRAINT:
        return None, []
    models = [model.strip() for model in spec.split("|") if model.strip()]
    unmapped = [model for model in models if model not in GPU_MODELS]
    if unmapped:
        return f"gpu:{spec}", unmapped
    return "gpu:" + "|".join(sorted({GPU_MODELS[model] for model in models})), []


def _at(start_us: int, seconds: int) -> int:
    return start_us + seconds * MICROS


def read(source: Path, options: Options) -> Imported:
    folder, pods_name = (source.parent, source.name) if source.is_file() else (source, POD_FILE)
    pods_path = require_file(folder / pods_name, f"the openb pod list {POD_FILE}")
    nodes_path = require_file(folder / NODE_FILE, f"the openb GPU node list {NODE_FILE} beside the pod list")
    if ACCELERATOR not in options.accelerators:
        raise SourceError(pods_path, None, f"accelerator key {ACCELERATOR!r} is not in the catalogue")
    start_us = options.start_us if options.start_us is not None else parse_time_us(DEFAULT_START)
    gpus_by_model = _gpus_by_model(nodes_path)
    rows = list(_csv_rows(pods_path, POD_COLUMNS))  # whole file first: a truncated tail fails before any output
    # The trace's last instant, over the whole file even when --limit takes a few pods.
    last_instant = _last_instant(rows)
    if options.limit is not None:
        rows = rows[: options.limit]

    imported = Imported(NAME)
    imported.provenance = {
        **PROVENANCE,
        "inputs": [file_digest(pods_path), file_digest(nodes_path)],
        "accelerator": ACCELERATOR,
        "trace_start": format_time_us(start_us),
        "capacity_gpus_by_model": gpus_by_model,
    }
    fractional = 0
    constraints, unmapped_models = Counter(), Counter()
    for line, row in progress(rows, "openb pods", unit="pod"):
        pod = row["name"]
        try:
            num_gpu, created, scheduled, deleted = _pod(row)
        except Unmappable as exc:
            imported.reject(pods_path.name, f"line {line}", pod, exc.reason, exc.detail)
            continue
        topology, unmapped = gpu_constraint(row.get("gpu_spec") or "")
        if topology:
            constraints[topology] += 1
        if unmapped:
            unmapped_models.update(unmapped)
            imported.caveat(
                pods_path.name,
                pod,
                "gpu_spec names a GPU model with no catalogue key (undisclosed)",
                ", ".join(unmapped),
            )
        emit = JobEmitter(imported, PREFIX, pod, CLUSTER, ACCELERATOR)
        emit.scheduler("SUBMIT", _at(start_us, created), num_gpu, priority=PRIORITY.get(row["qos"]), topology=topology)
        if scheduled is not None:
            emit.scheduler("ALLOCATE", _at(start_us, scheduled), num_gpu)
            fractional += row["gpu_milli"].strip() not in ("", "1000")
        phase = row["pod_phase"]
        if phase == "Succeeded":
            emit.scheduler("FINISH", _at(start_us, deleted), 0)
        elif phase == "Failed":
            emit.scheduler("FAIL", _at(start_us, deleted), 0)
        elif not (phase == "Running" and deleted == last_instant):
            emit.scheduler("CANCEL", _at(start_us, deleted), 0)
    imported.provenance["fractional_gpu_pods_counted_as_whole"] = fractional
    imported.provenance["gpu_spec"] = {
        "pods_by_topology": dict(sorted(constraints.items())),
        "unmapped_models": dict(sorted(unmapped_models.items())),
        "model_keys": GPU_MODELS,
    }
    total = sum(gpus_by_model.values())
    capacity(imported, PREFIX, CLUSTER, ACCELERATOR, start_us, total)
    # Restated at the trace's last instant, which then becomes the run's as-of
    # time: pods still running there are measured to the end of the trace.
    capacity(imported, PREFIX, CLUSTER, ACCELERATOR, _at(start_us, last_instant), total)
    return imported
