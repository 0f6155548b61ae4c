"""A backfill's chunks read every new file once, not once a chunk.

A backfill (`mpg run --chunk_hours`, fleet_goodput/runs/compute.py) computes one
chunk of event time after the other, and a file may hold events of every
chunk: the simulator shuffles a fleet's events over all its files, and an
exporter's file straddles midnight. `SliceFiles` decodes each new file once
and writes, for every chunk, what `ReadAvroFiles` would give for those files
and that chunk (`file_outputs`: the chunk's events packed per key, the scheduler's
kept times, and in the first chunk the file's rejected rows and read
count), as marshalled (tag, value) pairs, one file per part of a group of
input files and chunk that has any. `ReadDecodedSlices` gives a chunk's pipeline
those outputs back, so a chunk costs its own events, not the whole input's again.

Files are decoded a group at a time, files of one stream up to `GROUP_BYTES`
together, and each group a part at a time (`columnar.slice_input_files`): small
files together up to `columnar.GROUP_ROWS` rows, a large file a group of its
blocks at a time, each part's share of every chunk written as soon as it is
decoded, so that this pass's memory follows a part, not the input (a single
job's file of millions of events). Small files go together because, where
every file spans the whole period, a job's events of one chunk are spread over
every file, and one element a file, job and chunk would make a chunk's work
grow with the number of files, that is with the input.

The slices live in the run's staging folder and never outlive the run; marshal is
the format `events.pack` already uses for the packed events inside them.
"""

from __future__ import annotations

import marshal
from collections import defaultdict

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from fleet_goodput.telemetry.columnar import Retracted, slice_input_files
from fleet_goodput.telemetry.decode import TimeSlice
from fleet_goodput.transforms.read import (
    EVENTS,
    KEPT_TIMES,
    READ_COUNTS,
    REJECTED,
    SAVED_STATE,
    as_tagged,
    file_outputs,
    open_input,
    saved_states,
    spreads_work,
)


# About 400,000 of the simulator's events: a unit of work of the slicing pass. Its memory is a part's
# (`columnar.slice_input_files`), whatever a group holds.
GROUP_BYTES = 8 * 2**20
SLICE = "slice"  # the source kind of a slice file among `ReadDecodedSlices`' files (beside SAVED_STATE)


def file_groups(files: list[tuple[str, str, int]], most_bytes: int = GROUP_BYTES) -> list[tuple[str, list[str]]]:
    """(stream, paths) groups of the (stream, path, size) `files`, in their order: consecutive files of one
    stream together while they hold no more than `most_bytes` (a larger file alone)."""
    groups, held = [], 0
    for stream, path, size in files:
        if groups and groups[-1][0] == stream and held + size <= most_bytes:
            groups[-1][1].append(path)
            held += size
        else:
            groups.append((stream, [path]))
            held = size
    return groups


def chunk_folder(folder: str, chunk: int) -> str:
    """Where the slices of chunk number `chunk` are written: `*.marshal` files, a few per group of files."""
    return f"{folder}/chunk-{chunk:04d}"


def _slice_path(folder: str, chunk: int, group_number: int, part_number: int) -> str:
    return f"{chunk_folder(folder, chunk)}/{group_number:06d}-{part_number:06d}.marshal"


def _write_slices(numbered_group, accelerators, chunks: list[TimeSlice], folder: str) -> int:
    """Decode one group of input files once and write each chunk's share of it, a part at a time
    (`columnar.slice_input_files`: a group of blocks, or a few small files), so that memory follows
    a part, not the group; returns how many slices were written. The slices of a part that is
    retracted are deleted: its file's reference decode follows. A file gone since it was listed is
    left out: the run computes again without it (fleet_goodput/runs/batch.py)."""
    group_number, (stream, paths) = numbered_group
    parts = slice_input_files(stream, paths, accelerators, chunks, open_file=open_input, step_blocks=True)
    written, provisional = 0, defaultdict(list)
    for part_number, part in enumerate(parts):
        if isinstance(part, Retracted):
            void = provisional.pop(part.file, [])
            FileSystems.delete(void)
            written -= len(void)
            continue
        for chunk, (during, decoded) in enumerate(zip(chunks, part.decoded)):
            pairs = list(file_outputs(stream, decoded, during))
            if pairs:
                path = _slice_path(folder, chunk, group_number, part_number)
                with FileSystems.create(path) as out:
                    out.write(marshal.dumps(pairs))
                written += 1
                if part.provisional is not None:
                    provisional[part.provisional].append(path)
    return written


class SliceFiles(beam.PTransform):
    """Each of the given (stream, paths) groups of files decoded once, its share of each of `chunks`
    written under `folder` (`chunk_folder`); outputs how many slices each group gave."""

    def __init__(self, groups: list[tuple[str, list[str]]], accelerators, chunks: list[TimeSlice], folder: str):
        super().__init__()
        self.groups, self.accelerators, self.chunks, self.folder = groups, accelerators, chunks, folder

    def expand(self, pbegin):
        return (
            pbegin
            | "ListGroups" >> beam.Create(list(enumerate(self.groups)), reshuffle=spreads_work(pbegin.pipeline.options))
            | "DecodeOnceAndSlice" >> beam.Map(_write_slices, self.accelerators, self.chunks, self.folder)
        )


def read_slice(path: str) -> list[tuple[str, object]]:
    with FileSystems.open(path, compression_type="uncompressed") as handle:
        return marshal.loads(handle.read())


class ReadDecodedSlices(beam.PTransform):
    """The slices `SliceFiles` wrote for one chunk, and the store's saved state → the outputs
    `ReadAvroFiles` gives for its files, that chunk and the state."""

    def __init__(self, paths: list[str], state_files: list[str] = ()):
        super().__init__()
        self.sources = [(SLICE, path) for path in paths] + [(SAVED_STATE, path) for path in state_files]

    def expand(self, pbegin):
        return (
            pbegin
            | "ListSlices" >> beam.Create(self.sources, reshuffle=spreads_work(pbegin.pipeline.options))
            | "ReadSlices" >> beam.FlatMap(_read_source).with_outputs(REJECTED, READ_COUNTS, KEPT_TIMES, main=EVENTS)
        )


def _read_source(source: tuple[str, str]):
    kind, path = source
    return saved_states(path) if kind == SAVED_STATE else map(as_tagged, read_slice(path))
