"""Where `mpg run`'s time goes: a sampling profile of one run, summed by stage.

Runs `mpg run` in this process under pyinstrument (a sampling profiler, so
the per-call cost of deterministic profiling does not inflate the Python-heavy
stages) and files every sample under the stage of the innermost frame that
belongs to one: imports, building the Beam graph, decode (fastavro or the columnar reader), validate (building
and checking events in fleet_goodput/telemetry/decode.py or columnar.py), timeline,
sessionize (the keyed-state glue around it), Beam's state cache sizing, write,
DuckDB views, imports, and Beam itself (coders, shuffle, bundles) for samples
in none of these.

    .venv/bin/pip install pyinstrument   # a profiler, not a project dependency
    .venv/bin/mpg simulate --out /tmp/fleet --hours 12 --seed 11
    .venv/bin/python benchmarks/profile_run.py /tmp/fleet

It then times the same stages in plain Python, outside Beam, on the same
files: fastavro's decode alone, `decode_file` (decode + validate + events),
`decode_file_fast` where the checkout has it, and every key's timeline fed,
closed and flushed. Prints seconds and shares
per stage; not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

# (stage, substrings of a frame's file path or function); the innermost frame
# matching any rule names the sample's stage. Order matters only inside one frame.
STAGE_RULES = (
    ("imports", ("<frozen importlib._bootstrap",)),
    # A frame's identifier is "function\0file\0line": composites' expand() build the graph.
    ("build the Beam graph", ("expand\x00", "build_batch\x00", "build_goodput\x00")),
    ("Beam state cache sizing", ("/objsize/", "statecache.py")),
    ("decode: fastavro", ("/fastavro/",)),
    ("decode: columnar reader", ("/polars/",)),
    (
        "validate + build events",
        ("fleet_goodput/telemetry/decode.py", "fleet_goodput/telemetry/columnar.py", "fleet_goodput/core/events.py"),
    ),
    ("read step glue", ("transforms/read.py",)),
    ("timeline", ("fleet_goodput/core/timeline.py", "fleet_goodput/core/capacity.py", "fleet_goodput/core/windows.py")),
    ("sessionize glue (state, pickling)", ("transforms/sessionize", "transforms/stream_sessionize")),
    ("compute goodput rows", ("transforms/goodput.py",)),
    ("write Parquet", ("transforms/write.py", "fleet_goodput/store/tables.py", "/pyarrow/")),
    ("DuckDB views and manifest", ("fleet_goodput/store/views.py", "fleet_goodput/store/manifest.py", "/duckdb/")),
)
BEAM = "Beam: coders, shuffle, bundles, graph"


def stage_of(stack: list[str]) -> str:
    for frame in reversed(stack):  # innermost first
        for stage, needles in STAGE_RULES:
            if any(needle in frame for needle in needles):
                return stage
    return BEAM


def profile_run(input_dir: str, output_dir: str, extra_args: list[str]) -> tuple[dict[str, float], float]:
    from pyinstrument import Profiler

    from fleet_goodput.cli import main as mpg

    profiler = Profiler(interval=0.002)
    profiler.start()
    status = mpg(["run", "--input", input_dir, "--output", output_dir, *extra_args])
    session = profiler.stop()
    if status:
        raise SystemExit(f"mpg run exited with {status}")
    seconds = defaultdict(float)
    for stack, sample_s in session.frame_records:
        seconds[stage_of(stack)] += sample_s
    return dict(seconds), session.duration


def plain_stages(input_dir: str) -> dict[str, float]:
    """Seconds of each stage run alone, in plain Python, on every file of `input_dir`."""
    import fastavro

    from fleet_goodput.core.capacity import CapacityTimeline
    from fleet_goodput.core.config import load_settings
    from fleet_goodput.core.events import Event
    from fleet_goodput.core.keys import CAPACITY_KEY_PREFIX
    from fleet_goodput.core.timeline import JobTimeline
    from fleet_goodput.pipelines.goodput import peak_flops
    from fleet_goodput.telemetry.decode import decode_file

    settings = load_settings(None)
    files = [(path.parent.name, path) for path in sorted(Path(input_dir).glob("*/*.avro"))]
    seconds = {}

    started = time.perf_counter()
    for _, path in files:
        with open(path, "rb") as handle:
            for _ in fastavro.reader(handle):
                pass
    seconds["fastavro decode alone"] = time.perf_counter() - started

    started = time.perf_counter()
    by_key = defaultdict(list)
    for stream, path in files:
        with open(path, "rb") as handle:
            for key, batch in decode_file(stream, str(path), handle, settings.accelerators).batches.items():
                by_key[key].extend(batch)
    seconds["decode_file (decode + validate + events)"] = time.perf_counter() - started

    try:
        from fleet_goodput.telemetry.columnar import decode_file_fast
    except ImportError:  # a checkout from before the columnar path, profiled for a before/after
        decode_file_fast = None
    if decode_file_fast is not None:
        started = time.perf_counter()
        for stream, path in files:
            with open(path, "rb") as handle:
                decode_file_fast(stream, str(path), handle, settings.accelerators)
        seconds["decode_file_fast (columnar, same output)"] = time.perf_counter() - started

    as_of_us = max(event[0] for batch in by_key.values() for event in batch)
    window_us, peaks = settings.window_s * 1_000_000, peak_flops(settings)
    started = time.perf_counter()
    for key, batch in by_key.items():
        events = [Event._make(raw) for raw in batch]
        if key.startswith(CAPACITY_KEY_PREFIX):
            timeline = CapacityTimeline(window_us)
        else:
            timeline = JobTimeline(key, window_us, peaks)
        timeline.feed(events)
        timeline.close(as_of_us)
        timeline.flush()
    seconds["timelines (feed, close, flush)"] = time.perf_counter() - started
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="a telemetry folder (scheduler/, runtime/, profiler/)")
    parser.add_argument("--output", help="results folder (default: a temporary one)")
    args, extra = parser.parse_known_args()
    output = args.output or tempfile.mkdtemp(prefix="mpg-profile-")
    seconds, total = profile_run(args.input, output, extra)
    print(f"{'stage':<40} {'seconds':>8} {'share':>6}")
    for stage, spent in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"{stage:<40} {spent:>8.2f} {spent / total:>6.1%}")
    print(f"{'total (wall)':<40} {total:>8.2f}")
    print(f"\n{'the same stages alone, outside Beam':<40} {'seconds':>8}")
    for stage, spent in plain_stages(args.input).items():
        print(f"{stage:<40} {spent:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
