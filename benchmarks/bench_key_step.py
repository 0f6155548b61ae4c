"""Benchmark: `mpg run`'s key step alone, outside Beam, in CPU seconds.

Decodes every file of a telemetry folder as the read step does (columns,
each job's step events as STEP_BLOCKs), groups the packed batches per key
as Beam's shuffle would hand them on, then runs the key step's DoFn
(transforms/sessionize.py) on every key as a first run at the default as-of
time: collapsing the blocks into runs, the timelines, the state. Prints the
CPU seconds of the decode and of the key step, and how many events the
timelines applied one by one and how many in runs. Beam's own per-element
work, writing and committing are left out (`bench_run.py` measures a whole
run against the floors).

    .venv/bin/python benchmarks/bench_key_step.py /tmp/fleet        # e.g. bench_run's input

Not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from fleet_goodput.core import step_runs
from fleet_goodput.core.asof import CLOCK_STREAM, kept_times
from fleet_goodput.core.config import load_settings
from fleet_goodput.core.continuation import Continuation
from fleet_goodput.core.events import pack
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.core.timeline import JobTimeline
from fleet_goodput.pipelines.goodput import key_rules
from fleet_goodput.telemetry.columnar import decode_input_file
from fleet_goodput.transforms.sessionize import ClockFn, _AdvanceKeyFn

STREAMS = ("scheduler", "runtime", "profiler")


def decoded_per_key(input_dir: str, settings) -> tuple[dict[str, list], list, int]:
    """(key → its packed batches, one per file, the scheduler's kept times, batches)."""
    grouped, latest, batches = defaultdict(list), [], 0
    for stream in STREAMS:
        for path in sorted(Path(input_dir, stream).glob("*.avro")):
            decoded = decode_input_file(stream, str(path), settings.accelerators, step_blocks=True)
            for key, batch in decoded.batches.items():
                grouped[key].append(pack(batch))
                batches += 1
            if stream == CLOCK_STREAM:
                latest = kept_times(latest, decoded.kept_times)
    return grouped, latest, batches


def applied(grouped: dict[str, list], advance) -> Counter:
    """Events the timelines apply one by one and in runs, counted while `advance` runs every key."""
    counts = Counter()
    feed_one, apply_run = JobTimeline._feed_one, JobTimeline._apply_run

    def counted_feed_one(timeline, event, *rest):
        counts["events applied one by one"] += 1
        return feed_one(timeline, event, *rest)

    def counted_apply_run(timeline, run, *rest):
        done = apply_run(timeline, run, *rest)
        if done:
            counts["runs applied at once"] += 1
            counts["events in them"] += step_runs.size(run)
        return done

    JobTimeline._feed_one, JobTimeline._apply_run = counted_feed_one, counted_apply_run
    try:
        advance()
    finally:
        JobTimeline._feed_one, JobTimeline._apply_run = feed_one, apply_run
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="a telemetry folder (scheduler/, runtime/, profiler/)")
    args = parser.parse_args()
    settings = load_settings(None)

    started = time.process_time()
    grouped, latest, batches = decoded_per_key(args.input, settings)
    decode_s = time.process_time() - started

    continuation = Continuation()
    clock = ClockFn(None, continuation).extract_output(latest)
    key_step = _AdvanceKeyFn(key_rules(settings, RunSettings()), continuation)

    def advance():
        for key, packed in grouped.items():
            for _ in key_step.process((key, packed), clock):
                pass

    started = time.process_time()
    advance()
    key_step_s = time.process_time() - started
    counts = applied(grouped, advance)

    print(f"{len(grouped):,} keys, {batches:,} batches (one per key and file)")
    print(f"decode (columns, STEP_BLOCKs)   {decode_s:6.2f} CPU s")
    print(f"key step (collapse, timelines)  {key_step_s:6.2f} CPU s")
    for name, count in counts.items():
        print(f"{name:<31} {count:>9,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
