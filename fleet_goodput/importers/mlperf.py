"""MLPerf Training result logs (`:::MLLOG` lines) + system descriptions → all three streams.

SOURCE is any of:
  - the results repository as MLCommons publishes it (mlcommons/training_results_v*), or any
    folder within it that holds `<submitter>/results/<system>/<benchmark>/result_<n>.txt`
    with `<submitter>/systems/<system>.json`;
  - a flat folder: `results/<org>__<system>__<benchmark>__result_<n>.txt` and
    `systems/<org>__<system>.json`;
  - one log file from either layout (its system description found where the layout puts it),
    or any log with --accelerator KEY --chips N when it has no system description.
One run is one job on its own cluster (the system), holding all its chips:

    scheduler  CAPACITY = nodes × accelerators per node while the system has a run
               (0 between runs); SUBMIT + ALLOCATE at the first init_start;
               FINISH at run_stop when status is success, FAIL otherwise; a log
               without run_stop is a run that died: FAIL at its last event
    runtime    INIT from init_start to init_stop; STEP spans for training blocks
               (block_start..block_stop, else epochs, else run_start..run_stop),
               with evaluation (eval_start..eval_stop) cut out: the contract has no
               eval category, so eval time is no span and shows as `idle`. A block
               without block_stop ends at the next block_start, evaluation or run_stop;
               a block with evaluations inside it is split at them
    profiler   only for benchmarks whose model FLOPs follow from the log: GPT-3 and the
               Llama 3.1 pretraining runs (6·N·tokens, tokens = global_batch_size ×
               max_sequence_length), one sample per block with the block's measured
               time per step, in the precision the log or the system description states
               (FP8, FP4; else bf16)

Steps of a block come from its own edges where they are unambiguous (`step` on both, or
running samples_count totals that grow from block_start to block_stop), else from the
cumulative count the evaluation after the block (else the last inside it) is stamped with
(samples; GPT-3: tokens, as `epoch_num`): the first block starts at step 0 and each later
one where the one before it ended. A samples_count that block_start and block_stop repeat is never used: some
loggers write the block's size there, others the running total at the block's start.
The system's accelerator_model_name maps to a catalogue key through the catalogue's
`names` patterns (configs/accelerators.yaml; a user catalogue adds its own parts).
What the log leaves unknown (a run that died, steps, PG, precision) is said per run in
the import's caveats.

Finding the logs and reading their records is fleet_goodput/importers/mlperf_logs.py's; here a
run's records are mapped to events. See docs/importers.md for what the logs cannot tell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput.core.config import part_key
from fleet_goodput.importers.common import (
    Imported,
    JobEmitter,
    Options,
    Refused,
    Unmappable,
    assumed_peak,
    capacity,
)
from fleet_goodput.importers.mlperf_logs import MILLIS, ResultLog, mllog_records, result_logs, shown_path
from fleet_goodput.importers.reading import chip_count, file_digest, load_json, progress
from fleet_goodput.importers.spans import subtract

NAME = "mlperf"
HELP = (
    "MLPerf Training result logs (the results repository, results/ + systems/, or one log; "
    "--accelerator and --chips for a log without its system description) → scheduler, runtime and "
    "profiler events"
)
PREFIX = "mlperf"

# Parameter counts of models whose training FLOPs are 6·N per token (dense decoder-only
# transformers, attention FLOPs left out): the Llama model cards, and GPT-3 175B
# (Brown et al. 2020, table 2.1: 175.0 B parameters; MLPerf's gpt3 benchmark trains it).
MODEL_PARAMETERS = {"llama31_8b": 8.03e9, "llama31_405b": 405.85e9, "gpt3": 175.0e9}
# Benchmarks whose evaluations count tokens (`epoch_num`), not samples (`samples_count`).
TOKEN_COUNTED = frozenset({"gpt3"})

PROVENANCE = {
    "source": "MLCommons MLPerf Training results (mlcommons/training_results_v*; the samples: v4.0, v5.0, v5.1)",
    "licence": "Apache-2.0",
    "citation": "MLCommons, MLPerf Training results",
    "mapping": [
        "one run = one TRAINING job on a cluster named after the system (<submitter>__<system>); chips = nodes x "
        "accelerators per node; the accelerator from the catalogue entry whose `names` pattern matches the "
        "longest stretch of the system's accelerator_model_name",
        "CAPACITY = the system's chips while it has a run, 0 between runs",
        "SUBMIT and ALLOCATE at the first init_start; FINISH at run_stop if status is success, else FAIL",
        "INIT span from init_start to init_stop",
        "STEP spans: block_start..block_stop (else epoch_start..epoch_stop, else run_start..run_stop) minus "
        "eval_start..eval_stop; a block without block_stop ends at the next block_start, evaluation record or run_stop "
        "(a caveat says so); a block with evaluations inside it is split at each eval_start",
        "step numbers: `step` on both block edges, or samples_count running totals growing from block_start to "
        "block_stop, divided by global_batch_size; else the cumulative count of the evaluation after the block "
        "(else the last inside it) "
        "(samples_count / global_batch_size; gpt3: epoch_num tokens / (global_batch_size x max_sequence_length)), "
        "the first block starting at step 0; where neither says, no step numbers and no profiler sample (a caveat "
        "says so)",
        "profiler samples (ANALYTIC, 6*N*tokens) only for gpt3, llama31_8b and llama31_405b, one per block, with "
        "the precision the log's framework configuration (fp8/fp4 settings) or the system's notes state, else "
        "none (bf16)",
        "a log without run_stop: the run died; FAIL at its last event (a caveat says so)",
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


# A system description's notes naming the training precision ("FP8 Training").
PRECISION_NOTE = re.compile(r"\b(?:NV)?(FP8|FP4)\b", re.IGNORECASE)
PRECISION_FIELDS = ("sw_notes", "hw_notes", "framework")


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
    """The events of one result log that the mapping needs, in the log's line order."""

    def __init__(self, records: list[tuple[int, dict]]):
        self.records = records
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

    def keyed(self, *keys: str) -> list[tuple[int, dict]]:
        """(line, record) of the records whose key is one of `keys`, in line order."""
        return [(number, record) for number, record in self.records if record["key"] in keys]

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
            pairs.append(
                (
                    int(start["time_ms"] * MILLIS),
                    int(stop["time_ms"] * MILLIS),
                    start.get("metadata") or {},
                    stop.get("metadata") or {},
                )
            )
        return pairs


def _us(record: dict) -> int:
    return int(record["time_ms"] * MILLIS)


@dataclass(frozen=True)
class _Block:
    """One training block: from its start to its stop (None: the run died inside it and
    nothing ends it), and the log lines that bound the evaluation that counts its steps."""

    start: int
    stop: int | None
    start_meta: dict
    stop_meta: dict
    # (its first line, its last line: its stop's, else its first; the next block's first line)
    lines: tuple[int, int, float]
    logged_stop: bool = True  # False: no block_stop; it ends at the next block_start, evaluation or run_stop
    logged_start: bool = True  # False: a first block_stop with no block_start before it; it starts at run_start


# What ends a block that has no block_stop of its own: the next block, an evaluation, the run's end.
BLOCK_ENDS = ("block_start", "eval_start", "eval_accuracy", "eval_stop", "run_stop")


def _blocks(run: _Run) -> list[_Block]:
    """The log's training blocks in line order. A block_start whose block_stop never comes
    (some logs have six block_starts and one block_stop) ends at the next block_start,
    evaluation record or run_stop, whichever comes first; if none comes (the run died), it
    never ends. A block_stop before the first block_start (MaxText's GPT-3 logs open no
    first block) closes a block that started at run_start. A block with evaluations inside
    it (Habana's GPT-3 logs: one block for the whole run) is split at each of them."""
    starts, stops = run.keyed("block_start"), run.keyed("block_stop")
    blocks = []
    run_start = run.first.get("run_start")
    first_start = starts[0][0] if starts else float("inf")
    if stops and run_start and run_start[0] < stops[0][0] < first_start:
        line, stop = stops[0]
        blocks += _split_at_evaluations(
            run,
            _Block(
                _us(run_start[1]),
                _us(stop),
                {},
                stop.get("metadata") or {},
                (run_start[0], line, first_start),
                logged_start=False,
            ),
        )
    for index, (line, start) in enumerate(starts):
        next_line = starts[index + 1][0] if index + 1 < len(starts) else float("inf")
        stop = next(((n, r) for n, r in stops if line < n < next_line), None)
        if stop is not None:
            blocks += _split_at_evaluations(
                run,
                _Block(
                    _us(start),
                    _us(stop[1]),
                    start.get("metadata") or {},
                    stop[1].get("metadata") or {},
                    (line, stop[0], next_line),
                ),
            )
            continue
        end = next((r for n, r in run.keyed(*BLOCK_ENDS) if n > line), None)
        blocks.append(
            _Block(
                _us(start),
                _us(end) if end is not None else None,
                start.get("metadata") or {},
                {},
                (line, line, next_line),
                logged_stop=False,
            )
        )
    return blocks


def _split_at_evaluations(run: _Run, block: _Block) -> list[_Block]:
    """`block` cut at the evaluations logged inside it: each part runs from the end of the
    evaluation before it (or the block's start) to the start of the one after, which counts
    its steps; the last part runs to the block's stop."""
    first, last, following = block.lines
    inside = [(n, r) for n, r in run.keyed("eval_start") if first < n < last]
    if not inside:
        return [block]
    parts, start, start_line, meta = [], block.start, first, block.start_meta
    for line, evaluation in inside:
        stop_line, stop = next(((n, r) for n, r in run.keyed("eval_stop") if n > line), (line, evaluation))
        # The part's count is the first its evaluation (eval_start..eval_stop) is stamped with.
        parts.append(
            _Block(
                start, _us(evaluation), meta, {}, (start_line, line - 1, stop_line + 1), logged_start=block.logged_start
            )
        )
        start, start_line, meta = _us(stop), stop_line, {}
    return parts + [_Block(start, block.stop, {}, block.stop_meta, (start_line, last, following))]


def _whole_steps(count, per_step) -> int | None:
    """count ÷ per_step when both are numbers and it divides evenly."""
    if (
        isinstance(count, (int, float))
        and not isinstance(count, bool)
        and isinstance(per_step, (int, float))
        and per_step > 0
    ):
        steps = count / per_step
        return int(steps) if steps == int(steps) else None
    return None


EVAL_KEYS = ("eval_start", "eval_accuracy", "eval_stop")


def _edge_steps(block: _Block, batch_size) -> tuple[int, int] | None:
    """(steps before, steps at the end) where the block's own edges say it unambiguously: both
    carry `step`, or both carry samples_count and the stop's is larger (running totals at both
    edges). Equal counts say nothing: some loggers write the block's size on both edges, others
    the running total at the block's start, and the log does not say which."""
    first, last = block.start_meta.get("step"), block.stop_meta.get("step")
    if isinstance(first, int) and isinstance(last, int) and last > first:
        return first, last
    first = _whole_steps(block.start_meta.get("samples_count"), batch_size)
    last = _whole_steps(block.stop_meta.get("samples_count"), batch_size)
    if first is not None and last is not None and last > first:
        return first, last
    return None


def _evaluated_steps(run: _Run, block: _Block, count_key: str, per_step) -> int | None:
    """Steps done at the block's end from the cumulative count of the first evaluation logged
    after it and before the next block, else of the last one logged inside it (before its
    block_stop): the MLPerf logger stamps each evaluation with the samples (GPT-3: tokens,
    as `epoch_num`) trained so far."""
    first, last, following = block.lines

    def counts(low, high) -> list:
        found = [(r.get("metadata") or {}).get(count_key) for n, r in run.keyed(*EVAL_KEYS) if low < n < high]
        return [count for count in found if count is not None]

    after, inside = counts(last, following), counts(first, last)
    count = after[0] if after else inside[-1] if inside else None
    return _whole_steps(count, per_step) if count is not None else None


def _block_progress(
    run: _Run, blocks: list[_Block], benchmark: str, batch_size, sequence
) -> list[tuple[int, int] | None]:
    """Per block, (steps done before it, steps done at its end), or None where the log does not say:
    from the block's own edges, else from the evaluations' cumulative counts (the first block
    starting at step 0, each later one where the one before it ended)."""
    if benchmark in TOKEN_COUNTED:
        count_key = "epoch_num"
        per_step = (
            batch_size * sequence
            if isinstance(batch_size, (int, float)) and isinstance(sequence, (int, float))
            else None
        )
    else:
        count_key, per_step = "samples_count", batch_size
    progress, done = [], 0  # steps done when the block starts (None: unknown)
    for block in blocks:
        span = _edge_steps(block, batch_size)
        end = span[1] if span else _evaluated_steps(run, block, count_key, per_step)
        if span is None and done is not None and end is not None and end > done:
            span = (done, end)
        progress.append(span)
        done = end
    return progress


def _system(log: ResultLog, options: Options) -> tuple[str, int, dict]:
    """(accelerator key, chips, system description) of a run: from its system description, or
    for a log without one, from --accelerator and --chips."""
    if log.system_path is None or not log.system_path.is_file():
        if options.accelerator and options.chips:
            if options.accelerator not in options.accelerators:
                raise Unmappable("accelerator not in the catalogue", options.accelerator)
            return options.accelerator, options.chips, {}
        expected = shown_path(log.system_path) if log.system_path else "a systems/<org>__<system>.json beside results/"
        raise Unmappable("no matching system description (or pass --accelerator KEY --chips N)", expected)
    try:
        system = load_json(log.system_path, options.max_expanded_bytes)
    except Refused as exc:  # this run's system: the run is rejected, naming it
        raise Unmappable(
            exc.reason, f"{shown_path(log.system_path)}{f': {exc.detail}' if exc.detail else ''}"
        ) from None
    if not isinstance(system, dict):
        raise Unmappable("system description is not a JSON object", shown_path(log.system_path))
    model = str(system.get("accelerator_model_name", ""))
    accelerator = part_key(options.part_names, model)
    if accelerator is None or accelerator not in options.accelerators:
        raise Unmappable(
            "accelerator not in the catalogue (a catalogue entry's `names` maps part names to keys)", model
        )
    try:
        chips = int(system["number_of_nodes"]) * int(system["accelerators_per_node"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Unmappable("system description without integer number_of_nodes and accelerators_per_node") from exc
    return accelerator, chip_count(chips, "number_of_nodes × accelerators_per_node"), system


def _import_run(imported: Imported, log: ResultLog, options: Options) -> tuple[str, str, int, int, int]:
    """Emit one run's events; returns (cluster, accelerator, chips, start µs, end µs) for capacity."""
    accelerator, chips, system = _system(log, options)
    records, log_precisions = mllog_records(log.path, options.max_expanded_bytes)
    run = _Run(records)
    init_start, run_start, run_stop = run.time_us("init_start"), run.time_us("run_start"), run.time_us("run_stop")
    if init_start is None or run_start is None:
        raise Unmappable("no init_start or run_start: the run cannot be placed in time")
    file, item = log.file, log.job_id
    benchmark = str(run.value("submission_benchmark") or log.benchmark)
    emit = JobEmitter(imported, PREFIX, log.job_id, log.system_name, accelerator)
    topology = f"{system['number_of_nodes']}x{system['accelerators_per_node']}" if system else None
    emit.scheduler(
        "SUBMIT",
        init_start,
        chips,
        workload="TRAINING",
        framework=system.get("framework") or None,
        team=system.get("submitter") or None,
        topology=topology,
    )
    emit.scheduler("ALLOCATE", init_start, chips)
    emit.span("INIT", init_start, run.time_us("init_stop"))

    last_event = max(_us(record) for _, record in records)
    end = run_stop if run_stop is not None else last_event
    evals = [(start, stop) for start, stop, _, _ in run.intervals("eval_start", "eval_stop")]
    batch_size, sequence = run.value("global_batch_size"), run.value("max_sequence_length")
    blocks = _blocks(run) or [
        _Block(start, stop, first, last, (0, 0, 0))
        for start, stop, first, last in run.intervals("epoch_start", "epoch_stop") or [(run_start, end, {}, {})]
    ]
    block_steps = _block_progress(run, blocks, benchmark, batch_size, sequence)
    parameters = MODEL_PARAMETERS.get(benchmark)
    precision, evidence = _precision(log_precisions, system)
    profiled = 0
    for block, steps in zip(blocks, block_steps):
        if block.stop is None:  # the run died inside it: it never ends, and the FAIL makes it lost
            emit.span("STEP", block.start, None)
            continue
        # Training is what happens between run_start and run_stop: a last epoch_stop
        # logged after run_stop does not extend it.
        clipped = (max(block.start, run_start), min(block.stop, end))
        pieces = subtract(*clipped, evals) if clipped[0] < clipped[1] else []
        whole = steps is not None and pieces == [(block.start, block.stop)]
        for piece_start, piece_stop in pieces:
            # Step numbers only where the piece is the whole block: a block cut by an
            # evaluation does not say which steps fall on which side.
            emit.span("STEP", piece_start, piece_stop, steps[0] + 1 if whole else None, steps[1] if whole else None)
        if whole and parameters and isinstance(sequence, (int, float)) and isinstance(batch_size, (int, float)):
            first, last = steps
            emit.profile(
                block.stop,
                last,
                (block.stop - block.start) / 1e6 / (last - first),
                chips,
                6 * parameters * batch_size * sequence,
                "ANALYTIC",
                precision,
            )
            profiled += 1
    unclosed = sum(not block.logged_stop and block.stop is not None for block in blocks)
    if unclosed:
        imported.caveat(
            file,
            item,
            "blocks without block_stop: each ends at the next block_start, evaluation record or run_stop",
            f"{unclosed} of {len(blocks)} blocks",
        )
    if not evals and (run.all.get("eval_accuracy") or run.all.get("eval_stop")):
        imported.caveat(
            file,
            item,
            "evaluations without eval_start: their time cannot be told from training's and counts as step time",
            "RG is overstated and PG understated by the evaluations' share",
        )
    if not all(block.logged_start for block in blocks):
        imported.caveat(file, item, "a first block_stop without block_start: the block starts at run_start")
    if run_stop is None:
        emit.scheduler("FAIL", last_event, 0)
        imported.caveat(
            file,
            item,
            "no run_stop: the run died; FAIL at its last event",
            f"last event at {last_event // MILLIS} ms; a block left open is lost",
        )
    else:
        status = (run.first["run_stop"][1].get("metadata") or {}).get("status")
        emit.scheduler("FINISH" if status == "success" else "FAIL", run_stop, 0)
    unknown = sum(steps is None and block.stop is not None for block, steps in zip(blocks, block_steps))
    _pg_caveats(
        imported,
        file,
        item,
        benchmark,
        parameters,
        sequence,
        unknown,
        len(blocks),
        profiled,
        precision,
        evidence,
        assumed_peak(options, accelerator),
    )
    return log.system_name, accelerator, chips, init_start, end


def _pg_caveats(
    imported: Imported,
    file: str,
    item: str,
    benchmark,
    parameters,
    sequence,
    unknown_steps: int,
    blocks: int,
    profiled: int,
    precision,
    evidence: str,
    bf16_peak: str,
) -> None:
    """Why a run's PG is unknown, or on what precision it rests."""
    if parameters is None:
        imported.caveat(
            file, item, "PG unknown: the log does not give this benchmark's model FLOPs", f"benchmark {benchmark}"
        )
    elif not isinstance(sequence, (int, float)):
        imported.caveat(file, item, "PG unknown: no max_sequence_length in the log", f"benchmark {benchmark}")
    elif unknown_steps:
        imported.caveat(
            file,
            item,
            "steps unknown for some blocks: neither the block's edges nor an evaluation's "
            "cumulative count give them; those blocks have no profiler sample",
            f"{unknown_steps} of {blocks} blocks",
        )
    if profiled and precision is None:
        imported.caveat(
            file, item, "precision not stated in the log or the system description: bf16 assumed", bf16_peak
        )
    if profiled:
        imported.provenance.setdefault("precision_by_run", {})[item] = {
            "precision": precision or "bf16",
            "evidence": evidence,
        }


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
    logs = result_logs(source)
    imported = Imported(NAME)
    if options.limit is not None:
        for log in logs[options.limit :]:  # not imported, so on record
            imported.reject(log.file, "file", log.job_id, f"beyond --limit {options.limit}: not read")
        logs = logs[: options.limit]
    # The systems the runs name, and every one a flat folder holds (its provenance lists them all).
    listed = set((source / "systems").glob("*.json")) if source.is_dir() else set()
    systems = sorted(
        listed | {log.system_path for log in logs if log.system_path is not None and log.system_path.is_file()}
    )
    imported.provenance = {
        **PROVENANCE,
        "inputs": [file_digest(p) for p in [log.path for log in logs] + systems],
        "model_parameters": MODEL_PARAMETERS,
    }
    runs, seen = [], set()
    for log in progress(logs, "mlperf runs", unit="run"):
        try:
            if log.job_id in seen:
                raise Unmappable("the same run twice (a flat copy beside the results layout?)", log.job_id)
            seen.add(log.job_id)
            runs.append(_import_run(imported, log, options))
        except Unmappable as exc:  # this run only; the others are imported
            imported.reject(log.file, "file", log.job_id, exc.reason, exc.detail)
    _capacity(imported, runs)
    return imported
