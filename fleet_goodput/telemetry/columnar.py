"""A fast path for decoding a telemetry file: read it in columns, accept what is provably clean.

`decode_file_fast` returns exactly what `fleet_goodput.telemetry.decode.decode_file`
returns for the same file (the same batches per key, with identical event
tuples in the same order, the same rejected rows, the same read count), at a
fraction of the cost: polars reads an Avro file into columns about 8x faster
than fastavro yields records, and a few vectorised expressions check them
where the per-record path runs Python for every record.

It takes the fast path only when it can prove the answer is the reference's:
the file's writer schema is the stream's reader schema with exactly the
fields this module knows (no schema resolution to mimic), its blocks are
whole and run to its end, polars reads as many rows as they declare, and
every row passes a predicate that is stricter than any per-record rejection
rule (event ids unique within their group of blocks, of plain printable ASCII
under a length bound, event time between 2000-01-01 and a day from now,
bounded steps, chips and FLOPs, known enum symbols). Anything else, a file
with one doubtful row included, is decoded whole by `decode_file`, which
stays the reference: its rules and reasons then apply unchanged, and every
rejection reason comes from it.

A file is read a group of its blocks at a time (`GROUP_ROWS` records), so the
memory polars takes is a group's, not a file's. An id repeated in two groups
passes both: the reference path hands both events on too, and judging a
repeat (a duplicate, or a conflict) is the key step's, across groups as
across files.

One difference remains, on damaged files only: neither reader detects most
flipped bits inside a block (a changed digit decodes to another value in
both), and of those that break the encoding, polars lets an out-of-range
union branch index pass where fastavro rejects the block. A random
mutation test (600 flips, cuts and inserted bytes in null and deflate
files) found 5 such files, all bit flips; every cut and inserted byte
agreed, which tests/telemetry/test_columnar.py checks at every 5th byte.

Scheduler files always take the reference path: polars cannot read their
nullable enum (`workload`), and they are about 1% of the events.
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import BinaryIO

import fastavro
import polars as pl
from fastavro.read import HEADER_SCHEMA

from fleet_goodput import schemas
from fleet_goodput.core.asof import kept_times
from fleet_goodput.core.config import PRECISIONS
from fleet_goodput.core.events import PROFILE, RUNTIME_TYPES, same_instant_order
from fleet_goodput.core.step_runs import CODES, make_blocks
from fleet_goodput.telemetry.avro_blocks import read_long
from fleet_goodput.telemetry.avro_bounds import most_records, record_bytes_at_least
from fleet_goodput.telemetry import observed
from fleet_goodput.telemetry.avro_codecs import check_block
from fleet_goodput.telemetry.decode import (
    EARLIEST_PLAUSIBLE_US,
    LATEST_PLAUSIBLE_US,
    DecodedFile,
    TimeSlice,
    decode_file,
    rejected_row,
)
from fleet_goodput.telemetry.input_files import NotARegularFile, open_regular_file

# The fields each fast-path stream is written for, in schema order. A schema
# that gains a field sends its files to the reference path until this module
# learns what the field means for events.
KNOWN_FIELDS = {
    "runtime": ("event_id", "event_time", "job_id", "type", "step", "attempt"),
    "profiler": (
        "event_id",
        "event_time",
        "job_id",
        "step",
        "duration_s",
        "chips",
        "ideal_flops",
        "flops_source",
        "bytes_accessed",
        "precision",
    ),
}
FLOPS_SOURCES = ("HLO_UNOPTIMIZED", "ANALYTIC", "EXECUTED")

# Bounds of the clean-row predicate. They are far inside what real telemetry
# can reach and far outside what any per-record rule rejects near, so that a
# row passing them would pass every rule; a row outside goes to the reference.
# Ids: printable ASCII without '|' (capacity keys use it) or spaces.
CLEAN_ID = r"^[\x21-\x7b\x7d\x7e]{1,200}$"
MAX_STEP = 10**12
MAX_CHIPS = 2**20
MAX_DURATION_S = 7 * 24 * 3600.0
MAX_IDEAL_FLOPS = 1e30

_ORDER_OF_CODE = {code: same_instant_order(code) for code in (*RUNTIME_TYPES, PROFILE)}

# An input file smaller than this is decoded record by record (`decode_file`): the columnar path
# costs 2 to 3 ms a file whatever its size (polars' calls), fastavro about 10 us a record, and the
# step blocks it would make save little in a file of a minute (100 runtime events: 67 elements).
# Both break even near 200 events, 4 KiB of a deflated runtime file (docs/performance.md).
SMALL_FILE_BYTES = 4096

# A file is read in columns a group of its blocks at a time, of this many records at least: polars
# takes about 200 bytes a record to read and check them, so one job's file of 3 million events read
# whole peaked at 1.4 GB (docs/performance.md). Its fixed cost a read is a few ms.
GROUP_ROWS = 50_000


def decode_file_fast(
    stream: str, source: str, handle: BinaryIO, accelerators, during: TimeSlice | None = None, step_blocks: bool = False
) -> DecodedFile:
    """What `decode_file(stream, source, handle, accelerators)` returns, in columns where provable.

    With `during`, what `.during(during)` of that returns: only the slice's
    event tuples are built, the costliest part of a decode in columns. With
    `step_blocks`, a runtime file decoded in columns gives each job's step
    events (those with a step) and data waits (those without) as one
    STEP_BLOCK event a group of blocks holding them in columns
    (fleet_goodput/core/step_runs.py): expanded, the same events.
    """
    data = handle.read()
    groups = _clean_groups(stream, data) if stream in KNOWN_FIELDS else None
    parts = []
    for frame in groups or ():
        if frame is None:  # a group not provably clean: the file is decoded whole by the reference
            groups, parts = None, []
            break
        parts.append(_events_from_columns(stream, frame, during, step_blocks))
    if groups is None:
        decoded = decode_file(stream, source, io.BytesIO(data), accelerators)
        return decoded.during(during) if during else decoded
    return _merged(parts)


def decode_input_file(
    stream: str,
    path: str,
    accelerators,
    during: TimeSlice | None = None,
    open_file: Callable[[str], BinaryIO] = open_regular_file,
    step_blocks: bool = False,
) -> DecodedFile:
    """`decode_file_fast` of the input file at `path`, opened with `open_file`, or for a file under
    SMALL_FILE_BYTES `decode_file`, which returns the same and costs less there. A file that is not a
    regular one (fleet_goodput/telemetry/input_files.py) is not read: it is one record read and rejected."""
    try:
        handle = open_file(path)
    except NotARegularFile as exc:
        return DecodedFile(rejected=[rejected_row(stream, str(exc), path)], read=1)
    with handle:
        data = handle.read()
    if len(data) < SMALL_FILE_BYTES:
        decoded = decode_file(stream, path, io.BytesIO(data), accelerators)
        return decoded.during(during) if during else decoded
    return decode_file_fast(stream, path, io.BytesIO(data), accelerators, during, step_blocks)


@dataclass(frozen=True)
class SlicedPart:
    """Some rows of a group of input files decoded into each of a backfill's slices: `decoded[i]` is
    slice i's share. `provisional` names (by its index among the paths) the one file these rows are of
    while that file is not yet known to be clean to its end: a `Retracted` of it may follow."""

    decoded: list[DecodedFile]
    provisional: int | None = None


@dataclass(frozen=True)
class Retracted:
    """The parts yielded as `provisional` of file number `file` are void: a later group of its blocks
    was not provably clean, and its reference decode follows instead."""

    file: int


def slice_input_files(
    stream: str,
    paths: list[str],
    accelerators,
    slices: list[TimeSlice | None],
    open_file: Callable[[str], BinaryIO] = open_regular_file,
    step_blocks: bool = False,
) -> Iterator[SlicedPart | Retracted]:
    """`decode_input_file(..., during=s)` of each of `paths` (files of `stream`) for each of `slices`,
    a part at a time, so that memory follows a group of blocks (`GROUP_ROWS`), not the files: with the
    parts a `Retracted` voids left out, and each slice's parts merged, the same events, rejected rows,
    records read and kept times (`decode_input_files_slices`).

    A file whose every row is provably clean is decoded in columns: one of a single group of blocks
    joins the clean files before it until they hold `GROUP_ROWS` rows, so that each job's step events
    of many small files make one STEP_BLOCK a slice, not one a file; a larger file is decoded a group
    of its blocks at a time, each group's part provisional until its last group is read (a file is
    decoded in columns whole or not at all, as in `decode_file_fast`). The key step merges a job's
    blocks however they come. A file gone since it was listed is left out, as if it had not been listed.
    """
    waiting, waiting_rows = [], 0

    def flush() -> Iterator[SlicedPart]:
        nonlocal waiting, waiting_rows
        if waiting:
            frame = pl.concat(waiting) if len(waiting) > 1 else waiting[0]
            waiting, waiting_rows = [], 0
            yield SlicedPart([_events_from_columns(stream, frame, during, step_blocks) for during in slices])

    for number, path in enumerate(paths):
        try:
            handle = open_file(path)
        except NotARegularFile as exc:
            yield SlicedPart([DecodedFile(rejected=[rejected_row(stream, str(exc), path)], read=1) for _ in slices])
            continue
        except FileNotFoundError:
            continue
        with handle:
            data = handle.read()
        framing = _whole_blocks(stream, data) if stream in KNOWN_FIELDS else None
        header_end, groups = framing or (0, [])
        if len(groups) > 1:
            yield from flush()  # a provisional part holds this file's rows only
        for group, (start, end, records) in enumerate(groups):
            frame = _clean_frame(stream, data[:header_end] + data[start:end], records)
            if frame is None:
                if group:
                    yield Retracted(number)
                framing = None
                break
            if len(groups) > 1:
                yield SlicedPart([_events_from_columns(stream, frame, d, step_blocks) for d in slices], number)
            else:
                waiting.append(frame)
                waiting_rows += frame.height
        if framing is None:
            decoded = decode_file(stream, path, io.BytesIO(data), accelerators)
            yield SlicedPart([decoded.during(during) if during else decoded for during in slices])
        elif waiting_rows >= GROUP_ROWS:
            yield from flush()
    yield from flush()


def decode_input_files_slices(
    stream: str,
    paths: list[str],
    accelerators,
    slices: list[TimeSlice | None],
    open_file: Callable[[str], BinaryIO] = open_regular_file,
    step_blocks: bool = False,
) -> list[DecodedFile]:
    """`decode_input_file(..., during=s)` of each of `paths` for each of `slices`, the files of each
    slice merged: `slice_input_files`' parts put together, those it retracted left out."""
    parts: list[SlicedPart] = []
    for part in slice_input_files(stream, paths, accelerators, slices, open_file, step_blocks):
        if isinstance(part, Retracted):
            parts = [kept for kept in parts if kept.provisional != part.file]
        else:
            parts.append(part)
    return [_merged(list(of_slice)) for of_slice in zip(*(part.decoded for part in parts))] or [
        DecodedFile() for _ in slices
    ]


def event_time_counts(stream: str, data: bytes, window_us: int) -> dict[int, int]:
    """How many of the file's rows fall in each window of `window_us` (by the window's start), from its
    event_time column alone, read a group of blocks at a time: where a backfill's events are, which its
    chunks follow (fleet_goodput/runs/compute.py). Empty where the file is not read in columns
    (`_whole_blocks`) or polars fails on it: such a file is only planned less well, its decode is the same."""
    framing = _whole_blocks(stream, data) if stream in KNOWN_FIELDS else None
    if framing is None:
        return {}
    header_end, groups = framing
    counts = Counter()
    try:
        for start, end, _ in groups:
            group = pl.read_avro(io.BytesIO(data[:header_end] + data[start:end]), columns=["event_time"])
            time_us = group["event_time"].dt.epoch("us").drop_nulls()
            windows = (time_us - time_us % window_us).value_counts()
            counts.update(dict(zip(windows[:, 0].to_list(), windows[:, 1].to_list())))
    # A Rust panic in the reader is not an Exception; it means the same here.
    except (Exception, pl.exceptions.PanicException):  # noqa: BLE001 - a file polars cannot read is left out of the plan
        return {}
    return dict(counts)


def _merged(parts: list[DecodedFile]) -> DecodedFile:
    """Decoded files as one: each key's events of them all, every rejected row, the records of all."""
    if len(parts) == 1:
        return parts[0]
    batches = defaultdict(list)
    for part in parts:
        for key, batch in part.batches.items():
            batches[key] += batch
    return DecodedFile(
        batches=batches,
        rejected=[row for part in parts for row in part.rejected],
        read=sum(part.read for part in parts),
        kept_times=kept_times(*(part.kept_times for part in parts)),
        observed=observed.union(*(part.observed for part in parts)),
    )


def _clean_columns(stream: str, data: bytes) -> pl.DataFrame | None:
    """The file's rows as columns when every one of them is provably clean, else None."""
    frames = []
    for frame in _clean_groups(stream, data) or [None]:
        if frame is None:
            return None
        frames.append(frame)
    return pl.concat(frames) if len(frames) > 1 else frames[0]


def _clean_groups(stream: str, data: bytes) -> Iterator[pl.DataFrame | None] | None:
    """The file's rows as columns, a frame a group of its blocks (`GROUP_ROWS`), each read when
    asked: None for a group whose rows are not every one provably clean. None where the file's
    framing is not whole (`_whole_blocks`)."""
    framing = _whole_blocks(stream, data)
    if framing is None:
        return None
    header_end, groups = framing
    return (_clean_frame(stream, data[:header_end] + data[start:end], records) for start, end, records in groups)


def _clean_frame(stream: str, group: bytes, records: int) -> pl.DataFrame | None:
    """The rows of `group` (a file's header and some of its blocks, declaring `records` rows) as
    columns when every one of them is provably clean, else None. Ids unique within the group:
    a repeat in another group or file is the key step's to judge, as it judges one across files."""
    try:
        frame = pl.read_avro(io.BytesIO(group))
        clean = frame.height == records and frame.select(_clean_row(stream).all()).item()
    # A Rust panic in the reader is not an Exception; it means the same here.
    except (Exception, pl.exceptions.PanicException):  # noqa: BLE001 - truncated, corrupt or unsupported: the reference path says which
        return None
    return frame if clean else None


def _whole_blocks(stream: str, data: bytes) -> tuple[int, list[tuple[int, int, int]]] | None:
    """Where the file's header ends, and its blocks in groups of at least `GROUP_ROWS` records
    (the last one fewer): (start, end, records) of each group, if it was written with the
    stream's reader schema and its blocks run, each closed by the sync marker, exactly to its
    end, and it has a record; else None.

    polars reads past some damage that fastavro reports (trailing bytes after
    the last block, for one), so the framing is checked here, as fastavro
    checks it, before polars is trusted with the contents; and so are the
    counts, which no block may declare beyond what its bytes can hold, and the
    size each block decompresses to (fleet_goodput/telemetry/avro_codecs.py).
    """
    handle = io.BytesIO(data)
    try:
        header = fastavro.schemaless_reader(handle, HEADER_SCHEMA)
        record_bytes = record_bytes_at_least(header["meta"]["avro.schema"])
        codec = header["meta"].get("avro.codec", b"null").decode()
        writer = fastavro.parse_schema(json.loads(header["meta"]["avro.schema"]), named_schemas={})
        if (
            _without_docs(writer) != _without_docs(schemas.load(stream))
            or tuple(f["name"] for f in writer["fields"]) != KNOWN_FIELDS[stream]
        ):
            return None
        header_end = position = group_start = handle.tell()
        groups, records = [], 0
        while position < len(data):
            count, position = read_long(data, position)
            size, position = read_long(data, position)
            if count is None or size is None:
                return None  # a long cut short or past 10 bytes
            position += size
            if (
                count <= 0
                or size < 0
                or count > most_records(size, record_bytes, codec)
                or data[position : position + 16] != header["sync"]
            ):
                return None
            check_block(codec, data[position - size : position])  # polars would decompress it unbounded
            records, position = records + count, position + 16
            if records >= GROUP_ROWS or position >= len(data):
                groups.append((group_start, position, records))
                group_start, records = position, 0
    except Exception:  # noqa: BLE001 - an unreadable header or block, an unsafe schema: the reference describes it
        return None
    return (header_end, groups) if groups else None


def _without_docs(schema):
    """A parsed schema without its `doc` strings. No byte of a record depends on them, and a
    writer's copy of the contract may word them differently (an older copy, another language)."""
    if isinstance(schema, dict):
        return {key: _without_docs(value) for key, value in schema.items() if key != "doc"}
    if isinstance(schema, list):
        return [_without_docs(item) for item in schema]
    return schema


def _clean_row(stream: str) -> pl.Expr:
    """True for a row that every per-record rule of `stream` accepts, with room to spare."""
    event_time_us = pl.col("event_time").dt.epoch("us")
    clean = (
        # A repeated event_id is for the reference to judge (a duplicate, or a conflict).
        pl.col("event_id").is_unique()
        & pl.col("event_id").str.contains(CLEAN_ID).fill_null(False)
        & pl.col("job_id").str.contains(CLEAN_ID).fill_null(False)
        & event_time_us.is_between(EARLIEST_PLAUSIBLE_US, LATEST_PLAUSIBLE_US, closed="left").fill_null(False)
    )
    if stream == "runtime":
        return (
            clean
            & pl.col("type").cast(pl.String).is_in(RUNTIME_TYPES).fill_null(False)
            & (pl.col("step").is_null() | pl.col("step").is_between(0, MAX_STEP))
        )
    return (
        clean
        & pl.col("step").is_between(0, MAX_STEP).fill_null(False)
        & pl.col("chips").is_between(1, MAX_CHIPS).fill_null(False)
        & _bounded_positive("duration_s", MAX_DURATION_S)
        & _bounded_positive("ideal_flops", MAX_IDEAL_FLOPS)
        & pl.col("flops_source").cast(pl.String).is_in(FLOPS_SOURCES).fill_null(False)
        & (pl.col("precision").is_null() | pl.col("precision").is_in(PRECISIONS))
    )


def _bounded_positive(name: str, upper: float) -> pl.Expr:
    column = pl.col(name)
    return (column.is_finite() & (column > 0) & (column <= upper)).fill_null(False)


def _events_from_columns(
    stream: str, frame: pl.DataFrame, during: TimeSlice | None, step_blocks: bool = False
) -> DecodedFile:
    """Event tuples per job (per kept job), in file order, as `decode_file` builds them from records.

    The rows are first put in job order (jobs by first appearance, rows in file
    order within a job), so that every tuple is made by `zip` and every job's
    batch is one slice: no Python statement runs per row.
    """
    height = frame.height
    if during is not None:
        frame = _during(frame, during)
    batches = defaultdict(list)
    if step_blocks and stream == "runtime":
        frame = _step_blocks(frame, batches)
    frame = (
        frame.with_row_index("row")
        .with_columns(pl.col("row").min().over("job_id").alias("first_row"))
        .sort("first_row", "row")
    )
    times = frame["event_time"].dt.epoch("us").to_list()
    event_ids = frame["event_id"].to_list()
    if stream == "runtime":
        codes = frame["type"].cast(pl.String)
        orders = codes.replace_strict(_ORDER_OF_CODE, return_dtype=pl.Int64).to_list()
        rows = list(zip(times, orders, event_ids, codes.to_list(), zip(frame["step"].to_list())))
    else:
        payloads = zip(
            frame["step"].to_list(),
            frame["duration_s"].to_list(),
            frame["chips"].to_list(),
            frame["ideal_flops"].to_list(),
            frame["flops_source"].cast(pl.String).to_list(),
            frame["precision"].to_list(),
        )
        rows = list(zip(times, repeat(_ORDER_OF_CODE[PROFILE]), event_ids, repeat(PROFILE), payloads))
    jobs = frame["job_id"].rle()
    end = 0
    for job_id, length in zip(jobs.struct.field("value").to_list(), jobs.struct.field("len").to_list()):
        batches[job_id] += rows[end : end + length]
        end += length
    return DecodedFile(batches=batches, rejected=[], read=height)  # no kept times: not a scheduler file


def _step_blocks(frame: pl.DataFrame, batches: dict[str, list]) -> pl.DataFrame:
    """Put each job's step events that have a step and data waits that have none into `batches`
    as one STEP_BLOCK event in columns (fleet_goodput/core/step_runs.py: the key step makes runs of
    them); returns the other rows."""
    code, step = pl.col("type").cast(pl.String), pl.col("step")
    in_block = (code.is_in(CODES[:2]) & step.is_not_null()) | (code.is_in(CODES[2:]) & step.is_null())
    # A job's ids travel without its job id where every one begins with it (step_runs.make_blocks).
    job_id, event_id = pl.col("job_id"), pl.col("event_id")
    # Jobs in id order, each job's rows in file order. Grouped first and the few thousand groups
    # sorted, not the rows: sorting a million rows by their job's string took twice as long.
    jobs = (
        frame.with_row_index("row")
        .filter(in_block)
        .group_by("job_id")
        .agg(
            "row",
            pl.len().alias("events"),
            event_id.str.starts_with(job_id).all().alias("prefixed"),
            event_id.str.slice(job_id.str.len_chars()).str.join(" ").alias("rests"),
        )
        .sort("job_id")
    )
    if jobs.height:
        blocks = frame.select("event_time", "step", "type")[jobs["row"].explode()]
        times = blocks["event_time"].dt.epoch("us").to_numpy()
        steps = blocks["step"].fill_null(0).to_numpy()
        codes = (
            blocks["type"]
            .cast(pl.String)
            .replace_strict({name: number for number, name in enumerate(CODES)}, return_dtype=pl.Int8)
            .to_numpy()
        )
        job_ids, ids = jobs["job_id"].to_list(), jobs["rests"].to_list()
        prefixes = list(job_ids)
        for unprefixed in (~jobs["prefixed"]).arg_true().to_list():  # rare: their ids whole
            prefixes[unprefixed] = ""
            ids[unprefixed] = " ".join(frame["event_id"].gather(jobs["row"][unprefixed]).to_list())
        made = make_blocks(times, steps, codes, ids, jobs["events"].to_list(), prefixes)
        for job, block in zip(job_ids, made):
            batches[job].append(block)
    return frame.filter(~in_block)


def _during(frame: pl.DataFrame, times: TimeSlice) -> pl.DataFrame:
    """The rows of the events `times` holds."""
    time_us = pl.col("event_time").dt.epoch("us")
    if times.since_us is not None:
        frame = frame.filter(time_us >= times.since_us)
    return frame if times.until_us is None else frame.filter(time_us < times.until_us)
