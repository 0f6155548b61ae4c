"""Reading telemetry into validated, keyed event batches.

`ReadAvroFiles` reads the streams' Avro files (local paths, or gs:// with
Beam's file systems; a local path that is not a regular file is rejected
unread, fleet_goodput/telemetry/input_files.py) and decodes each file with
`decode_file_fast`: in columns where it can prove every row clean, else
record by record with fastavro (the reference path, which names every
rejection). Events leave grouped per key as packed lists of slim tuples
(`fleet_goodput.core.events.pack`), one for the files of a bundle: Beam's cost
is per element and per decoded object, and a job's events travel together
to the same key anyway. `DecodeRecords` does the same for records that
arrive one by one (tests, message queues).

The store's saved key state is read in the same step, each key's blob in the
same collection as the events (`fleet_goodput.core.events.saved`): the key step
joins them with one grouping, and a second collection would be flattened into
it first, which Beam's local runner does in a stage of its own, every event
crossing its shuffle twice.
"""

from __future__ import annotations

from collections import defaultdict

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from fleet_goodput import schemas
from fleet_goodput.core.asof import CLOCK_STREAM
from fleet_goodput.core.events import pack, saved
from fleet_goodput.telemetry.columnar import decode_input_file
from fleet_goodput.telemetry.decode import VALIDATORS, DecodedFile, Invalid, TimeSlice, contract_violation, rejected_row
from fleet_goodput.telemetry.input_files import open_regular_file

EVENTS, REJECTED, READ_COUNTS, KEPT_TIMES = "events", "rejected", "read_counts", "kept_times"
SAVED_STATE = "saved_state"  # the source kind of a state file among the read step's files


class _DecodeAvroFile(beam.DoFn):
    """(stream, path) → the file's events, one packed batch per key and bundle, and its rejected
    rows, read count and (of a scheduler file) kept times.

    A key's events of every file of a bundle leave together: Beam's cost is per
    element at every step it crosses, and the key step merges a key's batches
    whatever their number or order. On the local runner a run's files are one
    bundle, so bench_run's 29 files of 2,381 jobs make about 2 elements a job
    instead of 25 (58,930). When `FLUSH_ROWS` rows wait decoded (about 30 MB of
    step spans in columns, more for other events), they leave: that bounds the
    memory a bundle holds twice, decoded here and packed downstream (a Dataflow
    worker runs a bundle on each of its threads).
    """

    FLUSH_ROWS = 1_000_000

    def __init__(self, accelerators, during: TimeSlice | None):
        self.accelerators = accelerators
        self.during = during

    def start_bundle(self):
        self.waiting, self.waiting_rows = defaultdict(list), 0

    def process(self, stream_and_path):
        stream, path = stream_and_path
        if stream == SAVED_STATE:
            yield from saved_states(path)
            return
        try:
            decoded = decode_input_file(
                stream, path, self.accelerators, self.during, open_file=open_input, step_blocks=True
            )
        except FileNotFoundError:
            decoded = None  # gone since it was listed: the run computes again without it (fleet_goodput/runs/batch.py)
        if decoded is not None:
            yield from map(as_tagged, other_outputs(stream, decoded, self.during))
            for key, batch in decoded.batches.items():
                self.waiting[key] += batch
            self.waiting_rows += decoded.read
        if self.waiting_rows >= self.FLUSH_ROWS:
            yield from self._flush()

    def finish_bundle(self):
        # finish_bundle outputs need their window spelled out (the batch's global one).
        for keyed in self._flush():
            yield WindowedValue(keyed, GlobalWindow().max_timestamp(), (GlobalWindow(),))

    def _flush(self):
        waiting, self.waiting, self.waiting_rows = self.waiting, defaultdict(list), 0
        for key, batch in waiting.items():
            yield key, pack(batch)


def other_outputs(stream: str, decoded: DecodedFile, during: TimeSlice | None):
    """What reading a decoded file gives besides its events, as (tag, value) pairs: a scheduler file's
    kept times and, unless `during` is a later chunk, its rejected rows and read count."""
    if stream == CLOCK_STREAM and decoded.kept_times:
        yield KEPT_TIMES, decoded.kept_times
    if during is None or during.first:
        for row in decoded.rejected:
            yield REJECTED, row
        yield READ_COUNTS, ((stream, "read"), decoded.read)


def file_outputs(stream: str, decoded: DecodedFile, during: TimeSlice | None):
    """What reading a decoded file gives, as (tag, value) pairs: its keys' packed events, then `other_outputs`."""
    for key, batch in decoded.batches.items():
        yield EVENTS, (key, pack(batch))
    yield from other_outputs(stream, decoded, during)


def saved_states(path: str):
    """(key, `saved` blob) of each key a state file holds (the keys the store's last run left open).
    A whole file at a time: state files are small (a few MB for hundreds of open jobs), and Beam's
    ranged Parquet read would add six steps to every run."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        table = pq.read_table(handle, columns=["key", "blob"])
    return zip(table.column("key").to_pylist(), map(saved, table.column("blob").to_pylist()))


def as_tagged(pair):
    tag, value = pair
    return value if tag == EVENTS else beam.pvalue.TaggedOutput(tag, value)


def open_input(path: str):
    """A remote input file through Beam's file systems; a local one only if it is a regular file
    (else `NotARegularFile`, fleet_goodput/telemetry/input_files.py)."""
    if "://" in path:
        return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    return open_regular_file(path)


class ReadAvroFiles(beam.PTransform):
    """The given Avro files of each stream, and the store's saved state → events (and saved
    states), rejected rows, read counts.

    The run lists its files itself (those not applied by an earlier run), so
    they are named here rather than matched by a pattern. All streams share
    one read: every Beam step costs a fixed share of a run (a daily or
    streaming run pays it each time), and a file says its stream anyway.
    """

    def __init__(
        self, files: dict[str, list[str]], accelerators, during: TimeSlice | None = None, state_files: list[str] = ()
    ):
        """Each scheduler file's latest event times (of every key) come out in "kept_times", for the
        run's as-of time (fleet_goodput/core/asof.py). With `during` (a backfill's chunk of event time),
        only its events, and rejected rows and read counts only from the first chunk. The keys of
        `state_files` (the store's saved state) come out with the events, each as (key, `saved` blob)."""
        super().__init__()
        self.files = [(stream, path) for stream, paths in files.items() for path in paths]
        self.files += [(SAVED_STATE, path) for path in state_files]
        self.accelerators = accelerators
        self.during = during

    def expand(self, pbegin):
        return (
            pbegin
            # One file is one unit of work: Create reshuffles its elements, so a
            # distributed runner spreads the files over workers.
            | "ListFiles" >> beam.Create(self.files, reshuffle=spreads_work(pbegin.pipeline.options))
            | "DecodeAndValidate"
            >> beam.ParDo(_DecodeAvroFile(self.accelerators, self.during)).with_outputs(
                REJECTED, READ_COUNTS, KEPT_TIMES, main=EVENTS
            )
        )


def spreads_work(options: PipelineOptions) -> bool:
    """Whether reshuffling a step's elements can spread them over workers: not on Beam's in-process runner
    with one worker (`mpg run`'s default), where the reshuffle is four steps and a shuffle of their own,
    a stage of the run's dozen, and spreads nothing."""
    in_process = options.view_as(StandardOptions).runner == "FnApiRunner"
    return not (in_process and options.view_as(DirectOptions).direct_num_workers == 1)


def _decode_record(record: dict, stream: str, source: str, accelerators):
    # A dict has not been through Avro's schema resolution: check the contract here.
    problem = contract_violation(record, schemas.schema_json(stream), missing_is_a_violation=True)
    try:
        if problem:
            raise Invalid(problem)
        key, event = VALIDATORS[stream](dict(record), accelerators)
    except Invalid as exc:
        yield beam.pvalue.TaggedOutput(REJECTED, rejected_row(stream, str(exc), source, record))
    else:
        yield key, pack([tuple(event)])
        if stream == CLOCK_STREAM:
            yield beam.pvalue.TaggedOutput(KEPT_TIMES, [(event.time_us, key)])
    yield beam.pvalue.TaggedOutput(READ_COUNTS, ((stream, "read"), 1))


class DecodeRecords(beam.PTransform):
    """Records (dicts of the stream's schema) one by one → the outputs of `ReadAvroFiles`."""

    def __init__(self, stream: str, accelerators, source: str = "records"):
        super().__init__()
        self.stream = stream
        self.accelerators = accelerators
        self.source = source

    def expand(self, records):
        return records | "DecodeAndValidate" >> beam.FlatMap(
            _decode_record, stream=self.stream, source=self.source, accelerators=self.accelerators
        ).with_outputs(REJECTED, READ_COUNTS, KEPT_TIMES, main=EVENTS)
