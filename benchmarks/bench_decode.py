"""Benchmark: three ways to decode a telemetry folder into event batches.

- reference: `fleet_goodput.telemetry.decode.decode_file`, record by record (fastavro,
  a validator per record, an `Event` per record);
- lean per-record: fastavro records turned straight into event tuples with
  the checks inlined, the best a record-by-record path can hope for (it
  skips rejection reasons, so it is a bound, not a candidate for production);
- columnar: `fleet_goodput.telemetry.columnar.decode_file_fast` (polars columns, a
  vectorised clean-row check, the reference for anything doubtful).

All three run in this process on the same files, one after the other.

    .venv/bin/mpg simulate --out /tmp/fleet --hours 12 --seed 11
    .venv/bin/python benchmarks/bench_decode.py /tmp/fleet

Prints records/s per way; not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections import defaultdict
from pathlib import Path

import fastavro

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.events import PROFILE, same_instant_order
from fleet_goodput.core.timeutil import EPOCH, ONE_MICROSECOND
from fleet_goodput.telemetry.columnar import decode_file_fast
from fleet_goodput.telemetry.decode import EARLIEST_PLAUSIBLE_US, decode_file


def lean_per_record(stream: str, data: bytes) -> int:
    """Event tuples per job straight from fastavro's records; returns how many were kept."""
    batches = defaultdict(list)
    order = {}
    kept = 0
    for record in fastavro.reader(io.BytesIO(data)):
        time_us = (record["event_time"] - EPOCH) // ONE_MICROSECOND
        if not record["event_id"] or not record["job_id"] or time_us < EARLIEST_PLAUSIBLE_US:
            continue
        if stream == "runtime":
            code, payload = record["type"], (record["step"],)
            if payload[0] is not None and payload[0] < 0:
                continue
        else:
            code = PROFILE
            payload = (
                record["step"],
                record["duration_s"],
                record["chips"],
                record["ideal_flops"],
                record["flops_source"],
            )
        if code not in order:
            order[code] = same_instant_order(code)
        batches[record["job_id"]].append((time_us, order[code], record["event_id"], code, payload))
        kept += 1
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="a telemetry folder (runtime/ and profiler/ are decoded)")
    args = parser.parse_args()
    accelerators = load_settings(None).accelerators
    files = [
        (stream, path.read_bytes())
        for stream in ("runtime", "profiler")
        for path in sorted(Path(args.input, stream).glob("*.avro"))
    ]
    ways = {
        "reference decode_file": lambda stream, data: decode_file(stream, "", io.BytesIO(data), accelerators).read,
        "lean per-record (fastavro, inlined checks)": lean_per_record,
        "columnar decode_file_fast (polars)": lambda stream, data: (
            decode_file_fast(stream, "", io.BytesIO(data), accelerators).read
        ),
    }
    print(f"{'':<44} {'records':>9} {'seconds':>8} {'records/s':>11}")
    for name, decode in ways.items():
        started = time.perf_counter()
        records = sum(decode(stream, data) for stream, data in files)
        seconds = time.perf_counter() - started
        print(f"{name:<44} {records:>9,} {seconds:>8.2f} {records / seconds:>11,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
