"""MLPerf Training result logs (`:::MLLOG` lines) + system descriptions → all three streams.

SOURCE is a folder with `results/*.txt` (one run each, named
`<org>__<system>__<benchmark>__result_<n>.txt`) and `systems/<org>__<system>.json`.
One run is one job on its own cluster (the system), holding all its chips:

    scheduler  CAPACITY = nodes × accelerators per node while the system has a run
               (0 between runs); SUBMIT + ALLOCATE at the first init_start;
               FINISH at run_stop when status is success, FAIL otherwise; a log
               without run_stop is a run that died: FAIL at its last event
    runtime    INIT from init_start to init_stop; STEP spans for training blocks
               (block_start..block_stop, else epochs, else run_start..run_stop),
               with evaluation (eval_start..eval_stop) cut out: the contract has no
               eval category, so eval time is no span and shows as `idle`
    profiler   only for benchmarks whose model FLOPs follow from the log: the Llama 3.1
               pretraining runs (6·N·tokens, tokens = global_batch_size × max_sequence_length),
               one sample per block with the block's measured time per step, in the
               precision the log or the system description states (FP8, FP4; else bf16)

Steps of a block come from its `step` metadata, else from samples_count ÷
global_batch_size. Where block_start and block_stop carry the same samples_count
(the block's size, not a running total), the running total is the samples_count
of the evaluation that follows the block. What the log leaves unknown (a run
that died, steps, PG, precision) is said per run in the import's caveats.

See docs/importers.md for what the logs cannot tell.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from fleet_goodput.importers.common import (
    DEFAULT_MAX_EXPANDED_BYTES, Imported, JobEmitter, Options, Refused, SourceError, Unmappable, bounded_lines,
    capacity, chip_count, decode_json, event_time_us, file_digest, load_json, progress, subtract, too_long,
)

NAME = "mlperf"
HELP = "MLPerf Training result logs (results/*.txt) + systems/*.json → scheduler, runtime and profiler events"
PREFIX = "mlperf"
MARKER = ":::MLLOG"
MILLIS = 1000  # µs per ms

# System accelerator names (MLPerf Training and Inference `accelerator_model_name`)
# → catalogue keys. The first pattern that matches wins, so a name that contains
# another (GB300 ⊃ B300, GH200 ⊃ H200, L40S ⊃ L4) comes first.
ACCELERATOR_PATTERNS = (
    (r"GB300", "gb300"), (r"B300", "b300"), (r"GB200", "gb200"), (r"B200", "b200"),
    (r"GH200", "gh200"), (r"H200", "h200"),
    (r"H100\W*NVL", "h100-nvl"), (r"H100\W*PCIe", "h100-pcie"), (r"H100", "h100"), (r"A100", "a100"),
    (r"L40S", "l40s"), (r"\bL4\b", "l4"), (r"RTX\s*Pro\s*6000", "rtx-pro-6000"),
    (r"MI355X", "mi355x"), (r"MI350X", "mi350x"), (r"MI325X", "mi325x"), (r"MI300X", "mi300x"),
    (r"Gaudi\s*3|HL-325", "gaudi3"), (r"Gaudi\s*2|HL-225", "gaudi2"),
    (r"TPU\W*v?7|Ironwood", "tpu-v7"), (r"TPU\W*v6e|Trillium", "tpu-v6e"), (r"TPU\W*v5p", "tpu-v5p"),
    (r"TPU\W*v5\s*(e|lite)", "tpu-v5e"), (r"TPU\W*v4", "tpu-v4"),
)
# Parameter counts of models whose training FLOPs are 6·N per token (dense decoder-only
# transformers, attention FLOPs left out), from the model cards.
MODEL_PARAMETERS = {"llama31_8b": 8.03e9, "llama31_405b": 405.85e9}

PROVENANCE = {
    "source": "MLCommons MLPerf Training v5.1 results (mlcommons/training_results_v5.1)",
    "licence": "Apache-2.0",
    "citation": "MLCommons, MLPerf Training v5.1 results",
    "mapping": [
        "one run = one TRAINING job on a cluster named after the system; chips = nodes x accelerators per node",
        "CAPACITY = the system's chips while it has a run, 0 between runs",
        "SUBMIT and ALLOCATE at the first init_start; FINISH at run_stop if status is success, else FAIL",
        "INIT span from init_start to init_stop",
        "STEP spans: block_start..block_stop (else epoch_start..epoch_stop, else run_start..run_stop) minus "
        "eval_start..eval_stop; step numbers from the block's `step` metadata or samples_count / global_batch_size",
        "profiler samples (ANALYTIC, 6*N*tokens) only for llama31_8b and llama31_405b, one per block, with the "
        "precision the log's framework configuration (fp8/fp4 settings) or the system's notes state, else none (bf16)",
        "a log without run_stop: the run died; FAIL at its last event (a caveat says so)",
        "a block whose block_stop repeats block_start's samples_count: steps from the samples_count of the "
        "evaluation that follows it; where none follows, no step numbers and no profiler sample (a caveat says so)",
    ],
    "cannot_tell": [
        "queueing: the log starts at init_start, so SG is 100% for every run",
        "evaluation has no category in the contract: eval time shows as `idle`",
        "checkpoints: MLPerf runs finish in one attempt; all step time is productive at run_stop",
        "model FLOPs of the other benchmarks (LoRA fine-tuning, diffusion, detection, recommendation, GNN): "
        "no profiler sample, PG unknown",
        "numeric precision, where neither the log nor the system notes state it: bf16 is assumed (a caveat "
        "says so), although MLPerf LLM runs often train in FP8 or FP4; PG is then overstated",
    ],
}


def accelerator_key(model_name: str) -> str | None:
    for pattern, key in ACCELERATOR_PATTERNS:
        if re.search(pattern, model_name, flags=re.IGNORECASE):
            return key
    return None


# A framework configuration line that switches a low precision on, as the logs
# print it: `fp8: true`, `fp8='e4m3'`, `fp8: hybrid` (after an optional rank prefix `0:`).
PRECISION_SETTING = re.compile(rb"^\s*(?:\d+:)?\s*(?:use_)?(?:nv)?(fp8|fp4)\s*[:=]\s*['\"]?([^'\",\s]*)", re.IGNORECASE)
OFF_VALUES = {b"", b"false", b"none", b"null", b"0", b"off", b"no"}
# A system description's notes naming the training precision ("FP8 Training").
PRECISION_NOTE = re.compile(r"\b(?:NV)?(FP8|FP4)\b", re.IGNORECASE)
PRECISION_FIELDS = ("sw_notes", "hw_notes", "framework")


def _records(path: Path, limit: int = DEFAULT_MAX_EXPANDED_BYTES) -> tuple[list[tuple[int, dict]], dict[str, str]]:
    """(line number, record) of every `:::MLLOG` line, and the low precisions the
    other lines (the framework's own output) switch on: {precision: evidence}."""
    records, precisions = [], {}
    with open(path, "rb") as handle:
        for number, raw in bounded_lines(handle, limit):
            if raw is None:
                exc = too_long(limit)
                raise Unmappable(exc.reason, f"line {number}: {exc.detail}")
            position = raw.find(MARKER.encode())
            if position < 0:
                setting = PRECISION_SETTING.match(raw)
                if setting and setting.group(2).lower() not in OFF_VALUES:
                    precisions.setdefault(setting.group(1).decode().lower(),
                                          f"line {number}: {raw.decode('utf-8', 'replace').strip()[:80]}")
                continue
            try:
                record = decode_json(raw[position + len(MARKER):].decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise SourceError(path, f"line {number}", f"`{MARKER}` line that is not valid JSON; is the file "
                                                          f"truncated? ({exc})") from exc
            except Unmappable as exc:
                raise Unmappable(exc.reason, f"line {number}: {exc.detail}") from None
            if not isinstance(record, dict) or "key" not in record or not isinstance(record.get("time_ms"), (int, float)):
                raise SourceError(path, f"line {number}", f"`{MARKER}` record without a key or a numeric time_ms")
            try:
                event_time_us(record["time_ms"], "time_ms", MILLIS)
            except Unmappable as exc:
                raise Unmappable(exc.reason, f"line {number}: {exc.detail}") from None
            records.append((number, record))
    return records, precisions


def _precision(log_settings: dict[str, str], system: dict) -> tuple[str | None, str]:
    """The run's matrix precision and the evidence for it: the lowest one the log's
    configuration or the system's notes switch on; None (bf16) when neither says."""
    found = dict(log_settings)
    for name in PRECISION_FIELDS:
        for match in PRECISION_NOTE.finditer(str(system.get(name) or "")):
            found.setdefault(match.group(1).lower(), f"system {name}: {system[name]!r}")
    for precision in ("fp4", "fp8"):
        if precision in found:
            return precision, found[precision]
    return None, "neither the log nor the system description states a precision"


class _Run:
    """The events of one result log that the mapping needs."""

    def __init__(self, records: list[tuple[int, dict]]):
        self.first: dict[str, tuple[int, dict]] = {}
        self.all: dict[str, list[dict]] = {}
        for number, record in records:
            self.first.setdefault(record["key"], (number, record))
            self.all.setdefault(record["key"], []).append(record)

    def time_us(self, key: str) -> int | None:
        """The earliest time of `key` (every rank may log its own init_start)."""
        times = [record["time_ms"] for record in self.all.get(key, [])]
        return int(min(times) * MILLIS) if times else None

    def value(self, key: str):
        hit = self.first.get(key)
        return hit[1].get("value") if hit else None

    def intervals(self, start_key: str, stop_key: str) -> list[tuple[int, int, dict, dict]]:
        """Pairs of start and stop records in time order: (start µs, stop µs, start metadata, stop metadata)."""
        starts = sorted(self.all.get(start_key, []), key=lambda r: r["time_ms"])
        stops = sorted(self.all.get(stop_key, []), key=lambda r: r["time_ms"])
        pairs = []
        for start in starts:
            stop = next((s for s in stops if s["time_ms"] >= start["time_ms"]), None)
            if stop is None:
                continue
            stops.remove(stop)
            pairs.append((int(start["time_ms"] * MILLIS), int(stop["time_ms"] * MILLIS),
                          start.get("metadata") or {}, stop.get("metadata") or {}))
        return pairs


def _whole_steps(samples, batch_size) -> int | None:
    """samples ÷ global_batch_size when both are numbers and it divides evenly."""
    if isinstance(samples, (int, float)) and isinstance(batch_size, (int, float)) and batch_size > 0:
        steps = samples / batch_size
        return int(steps) if steps == int(steps) else None
    return None


def _step_count(metadata: dict, batch_size) -> int | None:
    """Steps completed at a block edge: its `step`, else samples_count / global_batch_size when whole."""
    if isinstance(metadata.get("step"), (int, float)):
        return int(metadata["step"])
    return _whole_steps(metadata.get("samples_count"), batch_size)


EVAL_KEYS = ("eval_start", "eval_accuracy", "eval_stop")


def _block_steps(run: _Run, block_stop_us: int, start_meta: dict, stop_meta: dict,
                 batch_size) -> tuple[int, int] | None:
    """(steps done before the block, steps done at its end), or None when the log does not say.

    From the blocks' own `step` or running samples_count; where block_stop
    repeats block_start's samples_count, that count is the block's size, and
    the running total is the samples_count of the first evaluation record at or
    after the block's end and before the next block starts (the MLPerf logger
    stamps evaluations with it)."""
    first, last = _step_count(start_meta, batch_size), _step_count(stop_meta, batch_size)
    if first is not None and last is not None and last > first:
        return first, last
    size = start_meta.get("samples_count")
    if "step" in stop_meta or size is None or size != stop_meta.get("samples_count"):
        return None
    next_block_us = min((r["time_ms"] * MILLIS for r in run.all.get("block_start", [])
                         if r["time_ms"] * MILLIS > block_stop_us), default=float("inf"))
    following = [r for key in EVAL_KEYS for r in run.all.get(key, [])
                 if block_stop_us <= r["time_ms"] * MILLIS < next_block_us
                 and "samples_count" in (r.get("metadata") or {})]
    if not following:
        return None
    total = _whole_steps(min(following, key=lambda r: r["time_ms"])["metadata"]["samples_count"], batch_size)
    steps = _whole_steps(size, batch_size)
    if total is None or not steps or total < steps:
        return None
    return total - steps, total


def _system(source: Path, result: Path, limit: int) -> tuple[str, dict]:
    parts = result.stem.split("__")
    if len(parts) != 4:
        raise Unmappable("result file name is not <org>__<system>__<benchmark>__result_<n>.txt")
    name = f"{parts[0]}__{parts[1]}"
    path = source / "systems" / f"{name}.json"
    if not path.is_file():
        raise Unmappable("no matching system description", f"systems/{name}.json")
    try:
        return name, load_json(path, limit)
    except Refused as exc:  # this run's system: the run is rejected, naming it
        raise Unmappable(exc.reason, f"systems/{name}.json{f': {exc.detail}' if exc.detail else ''}") from None


def _import_run(imported: Imported, source: Path, result: Path, options: Options) -> tuple[str, str, int, int, int]:
    """Emit one run's events; returns (cluster, accelerator, chips, start µs, end µs) for capacity."""
    system_name, system = _system(source, result, options.max_expanded_bytes)
    model = str(system.get("accelerator_model_name", ""))
    accelerator = accelerator_key(model)
    if accelerator is None or accelerator not in options.accelerators:
        raise Unmappable("accelerator not in the catalogue", model)
    try:
        chips = int(system["number_of_nodes"]) * int(system["accelerators_per_node"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Unmappable("system description without integer number_of_nodes and accelerators_per_node") from exc
    chip_count(chips, "number_of_nodes × accelerators_per_node")
    records, log_precisions = _records(result, options.max_expanded_bytes)
    run = _Run(records)
    init_start, run_start, run_stop = run.time_us("init_start"), run.time_us("run_start"), run.time_us("run_stop")
    if init_start is None or run_start is None:
        raise Unmappable("no init_start or run_start: the run cannot be placed in time")
    file, item = f"results/{result.name}", result.stem
    benchmark = run.value("submission_benchmark") or result.stem.split("__")[2]
    emit = JobEmitter(imported, PREFIX, result.stem, system_name, accelerator)
    emit.scheduler("SUBMIT", init_start, chips, workload="TRAINING", framework=system.get("framework") or None,
                   team=system.get("submitter") or None, topology=f"{system.get('number_of_nodes')}x"
                                                                  f"{system.get('accelerators_per_node')}")
    emit.scheduler("ALLOCATE", init_start, chips)
    emit.span("INIT", init_start, run.time_us("init_stop"))

    last_event = max(int(r["time_ms"] * MILLIS) for rs in run.all.values() for r in rs)
    end = run_stop if run_stop is not None else last_event
    evals = [(start, stop) for start, stop, _, _ in run.intervals("eval_start", "eval_stop")]
    batch_size = run.value("global_batch_size")
    block_pairs = run.intervals("block_start", "block_stop")
    blocks = block_pairs or run.intervals("epoch_start", "epoch_stop") or [(run_start, end, {}, {})]
    parameters = MODEL_PARAMETERS.get(str(benchmark))
    sequence = run.value("max_sequence_length")
    precision, evidence = _precision(log_precisions, system)
    profiled, unknown_steps = 0, 0
    for block_start, block_stop, start_meta, stop_meta in blocks:
        steps = _block_steps(run, block_stop, start_meta, stop_meta, batch_size)
        unknown_steps += steps is None
        # Training is what happens between run_start and run_stop: a last epoch_stop
        # logged after run_stop does not extend it.
        clipped = (max(block_start, run_start), min(block_stop, end))
        pieces = subtract(*clipped, evals) if clipped[0] < clipped[1] else []
        whole = steps is not None and pieces == [(block_start, block_stop)]
        for piece_start, piece_stop in pieces:
            # Step numbers only where the piece is the whole block: a block cut by an
            # evaluation does not say which steps fall on which side.
            emit.span("STEP", piece_start, piece_stop, steps[0] + 1 if whole else None, steps[1] if whole else None)
        if whole and parameters and isinstance(sequence, (int, float)) and isinstance(batch_size, (int, float)):
            first, last = steps
            emit.profile(block_stop, last, (block_stop - block_start) / 1e6 / (last - first), chips,
                         6 * parameters * batch_size * sequence, "ANALYTIC", precision)
            profiled += 1
    if run_stop is None:
        _died(emit, run, block_pairs, last_event)
        imported.caveat(file, item, "no run_stop: the run died; FAIL at its last event",
                        f"last event at {last_event // MILLIS} ms; a block left open is lost")
    else:
        status = (run.first["run_stop"][1].get("metadata") or {}).get("status")
        emit.scheduler("FINISH" if status == "success" else "FAIL", run_stop, 0)
    _pg_caveats(imported, file, item, benchmark, parameters, sequence, unknown_steps, len(blocks), profiled,
                precision, evidence)
    return system_name, accelerator, chips, init_start, end


def _died(emit: JobEmitter, run: _Run, block_pairs: list, last_event: int) -> None:
    """A run without run_stop: the training block it started after its last
    block_stop, if any, is opened and never ended (the FAIL closes it as lost),
    and the job FAILs at its last event."""
    after = max((stop for _, stop, _, _ in block_pairs), default=None)
    dangling = [int(r["time_ms"] * MILLIS) for r in run.all.get("block_start", [])
                if after is None or r["time_ms"] * MILLIS >= after]
    if block_pairs and dangling and max(dangling) < last_event:
        emit.span("STEP", max(dangling), None)
    emit.scheduler("FAIL", last_event, 0)


def _pg_caveats(imported: Imported, file: str, item: str, benchmark, parameters, sequence, unknown_steps: int,
                blocks: int, profiled: int, precision, evidence: str) -> None:
    """Why a run's PG is unknown, or on what precision it rests."""
    if parameters is None:
        imported.caveat(file, item, "PG unknown: the log does not give this benchmark's model FLOPs",
                        f"benchmark {benchmark}")
    elif not isinstance(sequence, (int, float)):
        imported.caveat(file, item, "PG unknown: no max_sequence_length in the log", f"benchmark {benchmark}")
    elif unknown_steps:
        imported.caveat(file, item, "steps unknown for some blocks: block_stop repeats block_start's samples_count "
                                    "and no evaluation count follows; those blocks have no profiler sample",
                        f"{unknown_steps} of {blocks} blocks")
    if profiled and precision is None:
        imported.caveat(file, item, "precision not stated in the log or the system description: bf16 assumed",
                        "PG is overstated if the run trained in FP8 or FP4")
    if profiled:
        imported.provenance.setdefault("precision_by_run", {})[item] = {"precision": precision or "bf16",
                                                                         "evidence": evidence}


def _capacity(imported: Imported, runs: list[tuple[str, str, int, int, int]]) -> None:
    """Each system is online (at its full size) while it has a run: the union of its runs' lifetimes."""
    by_system: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
    for cluster, accelerator, chips, start, end in runs:
        by_system.setdefault((cluster, accelerator, chips), []).append((start, end))
    for (cluster, accelerator, chips), spans in sorted(by_system.items()):
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            capacity(imported, PREFIX, cluster, accelerator, start, chips)
            capacity(imported, PREFIX, cluster, accelerator, end, 0)


def read(source: Path, options: Options) -> Imported:
    results = sorted((source / "results").glob("*.txt"))
    if not results:
        raise SourceError(source / "results", None, "no result logs (*.txt)")
    if options.limit is not None:
        results = results[:options.limit]
    imported = Imported(NAME)
    systems = sorted({p for p in (source / "systems").glob("*.json")})
    imported.provenance = {**PROVENANCE, "inputs": [file_digest(p) for p in results + systems],
                           "model_parameters": MODEL_PARAMETERS}
    runs = []
    for result in progress(results, "mlperf runs", unit="run"):
        try:
            runs.append(_import_run(imported, source, result, options))
        except Unmappable as exc:  # this run only; the others are imported
            imported.reject(f"results/{result.name}", "file", result.stem, exc.reason, exc.detail)
    _capacity(imported, runs)
    return imported
