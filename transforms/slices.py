"""A backfill's chunks read every new file once, not once a chunk.

A backfill (`mpg run --chunk_hours`, fleet_goodput/batch.py) computes one
chunk of event time after the other, and a file may hold events of every
chunk: the simulator shuffles a fleet's events over all its files, and an
exporter's file straddles midnight. `SliceFiles` decodes each new file once
and writes, for every chunk, what `ReadAvroFiles` would give for that file
and chunk (`file_outputs`: the chunk's events packed per key, the scheduler's
latest times, and in the first chunk the file's rejected rows and read
count), as marshalled (tag, value) pairs, one file per input file and chunk
that has any. `ReadDecodedSlices` gives a chunk's pipeline those outputs
back, so a chunk costs its own events, not the whole input's again.

The slices live in the run's staging folder and never outlive the run; marshal is
the format `events.pack` already uses for the packed events inside them.
"""

from __future__ import annotations

import marshal

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from fleet_goodput.columnar import decode_input_file_slices
from fleet_goodput.decode import TimeSlice
from fleet_goodput.transforms.read import (EVENTS, LATEST_TIMES, READ_COUNTS, REJECTED, as_tagged, file_outputs,
                                           open_input)


def chunk_folder(folder: str, chunk: int) -> str:
    """Where the slices of chunk number `chunk` are written: one `*.marshal` file per input file."""
    return f"{folder}/chunk-{chunk:04d}"


def _slice_path(folder: str, chunk: int, file_number: int) -> str:
    return f"{chunk_folder(folder, chunk)}/{file_number:06d}.marshal"


def _write_slices(numbered_file, accelerators, chunks: list[TimeSlice], folder: str) -> int:
    """Decode one input file once and write each chunk's share of it; returns how many were written."""
    file_number, (stream, path) = numbered_file
    try:
        decoded = decode_input_file_slices(stream, path, accelerators, chunks, open_file=open_input,
                                           step_blocks=True)
    except FileNotFoundError:
        return 0  # gone since it was listed: the run computes again without it (fleet_goodput/batch.py)
    written = 0
    for chunk, (during, part) in enumerate(zip(chunks, decoded)):
        pairs = list(file_outputs(stream, part, during))
        if pairs:
            with FileSystems.create(_slice_path(folder, chunk, file_number)) as out:
                out.write(marshal.dumps(pairs))
            written += 1
    return written


class SliceFiles(beam.PTransform):
    """Each of the given (stream, path) files decoded once, its share of each of `chunks` written
    under `folder` (`chunk_folder`); outputs how many slices each file gave."""

    def __init__(self, files: list[tuple[str, str]], accelerators, chunks: list[TimeSlice], folder: str):
        super().__init__()
        self.files, self.accelerators, self.chunks, self.folder = files, accelerators, chunks, folder

    def expand(self, pbegin):
        return (pbegin
                | "ListFiles" >> beam.Create(list(enumerate(self.files)))
                | "DecodeOnceAndSlice" >> beam.Map(_write_slices, self.accelerators, self.chunks, self.folder))


def read_slice(path: str) -> list[tuple[str, object]]:
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        return marshal.loads(handle.read())


class ReadDecodedSlices(beam.PTransform):
    """The slices `SliceFiles` wrote for one chunk → the outputs `ReadAvroFiles` gives for its files
    and that chunk."""

    def __init__(self, paths: list[str]):
        super().__init__()
        self.paths = paths

    def expand(self, pbegin):
        return (pbegin
                | "ListSlices" >> beam.Create(self.paths)
                | "ReadSlices" >> beam.FlatMap(lambda path: map(as_tagged, read_slice(path)))
                .with_outputs(REJECTED, READ_COUNTS, LATEST_TIMES, main=EVENTS))
