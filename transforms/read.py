"""Reading telemetry into validated, keyed event batches.

`ReadAvroFiles` reads a stream's Avro files with Beam's file IO (local paths
or gs://) and decodes each file with `decode_file_fast`: in columns where it
can prove every row clean, else record by record with fastavro (the reference
path, which names every rejection). Events
leave grouped per (file, key) as lists of slim tuples: Beam's cost is per
element, and a job's events of one file travel together to the same key
anyway. `DecodeRecords` does the same for records that arrive one by one
(tests, message queues).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.utils.windowed_value import WindowedValue

from fleet_goodput.columnar import decode_bytes
from fleet_goodput.decode import VALIDATORS, DecodedFile, Invalid, rejected_row

EVENTS, REJECTED, READ_COUNTS = "events", "rejected", "read_counts"


# Below this many files in a bundle, starting helper processes costs more than it saves.
PARALLEL_FROM_FILES = 8


class DecodeOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument(
            "--decode_workers", type=int, default=0,
            help="processes that decode a stream's files in parallel when a bundle holds at least "
                 f"{PARALLEL_FROM_FILES} files; 0 (default): every core under the local FnApiRunner, else 1")


_HELPERS: dict[int, ProcessPoolExecutor] = {}


def _helpers(count: int) -> ProcessPoolExecutor:
    """One pool of helper processes per process, shared by the streams' read steps;
    its processes end when this one exits."""
    if count not in _HELPERS:
        # forkserver, not fork: a forked copy of a process running polars' thread
        # pool can deadlock. Helpers fork from a server that imported the decoder once.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["fleet_goodput.columnar"])
        _HELPERS[count] = ProcessPoolExecutor(count, mp_context=context)
    return _HELPERS[count]


class _DecodeAvroFile(beam.DoFn):
    """Decodes each file; with `workers` > 1, a bundle of many files is shared
    between this process and `workers` - 1 helper processes.

    This process reads each file's bytes (Beam's file IO, any file system);
    a helper is handed the bytes and returns the decoded batches, so helpers
    import neither Beam nor file-system clients. While helpers work, this
    process decodes files itself: a helper's result costs a third of a decode
    to unpickle, so a helper that only moved work would gain nothing. Outputs
    keep the timestamp and window of their own file.
    """

    def __init__(self, stream: str, accelerators, workers: int):
        self.stream = stream
        self.accelerators = accelerators
        self.workers = workers

    def start_bundle(self):
        self._waiting = []  # (readable file, timestamp, window) until the bundle is big enough for helpers
        self._running = []  # (future, timestamp, window), in file order
        self._sharing = False  # once the bundle has enough files, every further one is shared out at once

    def process(self, readable_file, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
        if self.workers <= 1:
            yield from self._outputs(self._decode(readable_file))
            return
        self._waiting.append((readable_file, timestamp, window))
        if not self._sharing and len(self._waiting) < PARALLEL_FROM_FILES:
            return
        self._sharing = True
        waiting, self._waiting = self._waiting, []
        for readable_file, timestamp, window in waiting:
            # Two files in flight per helper keep it busy while this process decodes one.
            if len(self._running) < 2 * (self.workers - 1):
                self._running.append((self._submit(readable_file), timestamp, window))
            else:
                yield from self._windowed(self._decode(readable_file), timestamp, window)
            while self._running and self._running[0][0].done():
                future, done_timestamp, done_window = self._running.pop(0)
                yield from self._windowed(future.result(), done_timestamp, done_window)

    def finish_bundle(self):
        for readable_file, timestamp, window in self._waiting:
            yield from self._windowed(self._decode(readable_file), timestamp, window)
        for future, timestamp, window in self._running:
            yield from self._windowed(future.result(), timestamp, window)

    def _read(self, readable_file) -> bytes:
        with readable_file.open(compression_type=beam.io.filesystem.CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read()

    def _decode(self, readable_file) -> DecodedFile:
        return decode_bytes(self.stream, readable_file.metadata.path, self._read(readable_file), self.accelerators)

    def _submit(self, readable_file):
        return _helpers(self.workers - 1).submit(
            decode_bytes, self.stream, readable_file.metadata.path, self._read(readable_file), self.accelerators)

    def _outputs(self, decoded: DecodedFile):
        for row in decoded.rejected:
            yield beam.pvalue.TaggedOutput(REJECTED, row)
        yield from decoded.batches.items()
        yield beam.pvalue.TaggedOutput(READ_COUNTS, ((self.stream, "read"), decoded.read))

    def _windowed(self, decoded: DecodedFile, timestamp, window):
        """`_outputs` with their own file's timestamp and window (finish_bundle has
        no current element, and process may emit an earlier file's outputs)."""
        for output in self._outputs(decoded):
            if isinstance(output, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(output.tag, WindowedValue(output.value, timestamp, [window]))
            else:
                yield WindowedValue(output, timestamp, [window])


def decode_workers(options: PipelineOptions) -> int:
    workers = options.view_as(DecodeOptions).decode_workers
    if workers > 0:
        return workers
    runner = str(options.view_as(StandardOptions).runner or "")
    return (os.cpu_count() or 1) if runner.endswith("FnApiRunner") else 1


class ReadAvroFiles(beam.PTransform):
    """All Avro files of one stream matching `pattern` → events, rejected rows, read counts."""

    def __init__(self, stream: str, pattern: str, accelerators):
        super().__init__()
        self.stream = stream
        self.pattern = pattern
        self.accelerators = accelerators

    def expand(self, pbegin):
        workers = decode_workers(pbegin.pipeline.options)
        return (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(self.pattern, empty_match_treatment=fileio.EmptyMatchTreatment.ALLOW)
            | "ReadMatches" >> fileio.ReadMatches()
            # One file is one unit of work; the reshuffle lets a distributed
            # runner spread files over workers instead of reading them serially.
            | "SpreadFiles" >> beam.Reshuffle()
            | "DecodeAndValidate" >> beam.ParDo(_DecodeAvroFile(self.stream, self.accelerators, workers))
            .with_outputs(REJECTED, READ_COUNTS, main=EVENTS)
        )


def _decode_record(record: dict, stream: str, source: str, accelerators):
    try:
        key, event = VALIDATORS[stream](dict(record), accelerators)
    except Invalid as exc:
        yield beam.pvalue.TaggedOutput(REJECTED, rejected_row(stream, str(exc), source, record))
    else:
        yield key, [tuple(event)]
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
        ).with_outputs(REJECTED, READ_COUNTS, main=EVENTS)
