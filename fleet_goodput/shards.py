"""Splitting a local run's keys over processes, so that a big run uses every core.

Beam's local runner computes in one process, and its multi-process mode pays
more to move elements between processes than the work costs
(docs/performance.md, section 4). Keys are independent, though: a job's
timeline never looks at another job. So a big local run starts one pipeline
per core, each reading every new file but sessionizing only its share of the
keys (by a hash of the key), and commits what they staged as one run.

Two things are not per key, and the shards agree on them:
- *Records rejected while decoding, and the count of records read*, belong
  to no key: only shard 0 reports them, so each is counted once.
- *The as-of time.* By default it follows the scheduler's latest event
  times (fleet_goodput/asof.py), which every shard reads from every file
  (or from a chunk's file of them), so every shard finds the same one.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import zlib
from dataclasses import dataclass
from multiprocessing import forkserver
from pathlib import Path

# What the server that shard processes fork from imports once, before any shard starts (first:
# what makes it and its shards end quietly on Ctrl-C).
PRELOADED = ["fleet_goodput.quiet_shards", "fleet_goodput.pipelines.goodput"]

# Below this much new Avro per shard (about 450k events of the simulator's
# telemetry, 18 bytes each), a process's start-up and its read of every file
# cost more than its share of the keys saves.
MIN_BYTES_PER_SHARD = 8 << 20
# A chunk of a chunked run (fleet_goodput/chunks.py) comes decoded and cut by
# shard, so a shard reads only its own events: splitting pays from far fewer.
MIN_CHUNK_EVENTS_PER_SHARD = 100_000


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`."""

    index: int
    count: int

    def owns(self, key: str) -> bool:
        return shard_of(key, self.count) == self.index

    @property
    def reports_decoding(self) -> bool:
        """Whether this shard reports what no key owns: decoding rejections and records read."""
        return self.index == 0


def shard_of(key: str, count: int) -> int:
    """The index of the shard of `count` that owns `key`."""
    # crc32, not hash(): string hashes differ from one process to the next.
    return zlib.crc32(key.encode()) % count


def shard_count(workers: int | None, new_bytes: int, local: bool) -> int:
    """How many shards a run uses: `workers` when given, else one per core for a big local run."""
    if workers is not None:
        if workers < 1:
            raise ValueError(f"--workers must be at least 1 (got {workers})")
        return workers
    if not local:
        return 1  # a distributed runner spreads the keys itself
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, new_bytes // MIN_BYTES_PER_SHARD))


def process_context():
    """Processes forked from a server that imported the pipeline once, not from the run's own: a
    child forked from a process that has run a pipeline (or holds Delta Lake's threads) can
    deadlock on a lock some thread held at the fork, as tests/test_shards.py did."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    return context


def start_process_server(input_dir: str, workers: int | None) -> bool:
    """Start the server shard processes fork from now, if a run over `input_dir` will likely use it.

    The server spends about 2 s importing Beam and the pipeline; started as a
    command begins, that import runs beside the command's own import of Beam
    instead of after it. A guess from the input's size on disk: a run that
    turns out to need no shards (most of the input applied already, say) only
    leaves the server idle. Returns whether it started one.
    """
    if (workers is not None and workers < 2) or "://" in input_dir or not Path(input_dir).is_dir():
        return False
    # Regular files only: a pipe or a device is never read (fleet_goodput/input_files.py), a link to nothing
    # cannot be (Beam's listing leaves it out).
    size = sum(path.stat().st_size for path in Path(input_dir).glob("*/*.avro") if path.is_file())
    if shard_count(workers, size, local=True) < 2:
        return False
    if process_context().get_start_method() != "forkserver":  # which also names what the server preloads
        return False
    # Started deaf to Ctrl-C (a disposition a new process keeps) until fleet_goodput/quiet_shards.py
    # makes it end quietly: a traceback of its start-up would otherwise follow the command's line.
    hearing = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, hearing)
    return True
