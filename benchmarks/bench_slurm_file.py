"""Benchmark: the memory `mpg import slurm` takes to read a big sacct file (fleet_goodput/importers/slurm.py).

Generates a `sacct --parsable2` file of about `--mib` MiB of one kind, then maps it
(`slurm.convert`, what `mpg import slurm` does before writing) in a process of its
own and prints the process's peak resident memory (VmHWM) and time:

- `one-row`: a header, then lines without a `|` that all carry on the first row,
  as a file that is not sacct's reads: one row read past, one rejection;
- `cpu-only`: rows of CPU-only jobs, every one rejected (nothing usable);
- `jobs`: rows of GPU jobs that completed, with a 200-byte SubmitLine, all imported.

The file is read as a stream, so the first kind's peak does not grow with the file;
the others hold one rejection or one job's events per row, so theirs grows with the
rows, not with the bytes of their text.

    .venv/bin/python benchmarks/bench_slurm_file.py [--mib 512] [--kind one-row cpu-only jobs]

Not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = (
    "JobID|JobIDRaw|Cluster|Partition|Account|QOS|Priority|State|ExitCode|Reason|Submit|Eligible|Start|End|"
    "Timelimit|ReqTRES|AllocTRES|NodeList|SubmitLine\n"
)
GPU = "billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,node=1"
CPU = "billing=1,cpu=4,mem=1G,node=1"


def _row(number: int, tres: str) -> str:
    return (
        f"{number}|{number}|bench|batch|llm|normal|7|COMPLETED|0:0|None|2026-03-01T10:00:00|"
        f"2026-03-01T10:00:00|2026-03-01T10:00:05|2026-03-01T11:00:00|UNLIMITED|{tres}|{tres}|n1|"
        f"sbatch --wrap '{'x' * 200}'\n"
    )


def generate(path: Path, kind: str, size: int) -> int:
    """Write about `size` bytes of `kind` to `path`; the rows written."""
    rows = 0
    with open(path, "w") as handle:
        handle.write(HEADER)
        written = len(HEADER)
        while written < size:
            block = (
                ("y" * 1000 + "\n") * 1000
                if kind == "one-row"
                else "".join(_row(rows + n, GPU if kind == "jobs" else CPU) for n in range(1000))
            )
            handle.write(block)
            written += len(block)
            rows += 1 if kind == "one-row" and rows == 0 else 0 if kind == "one-row" else 1000
    return rows


MEASURE = """
import sys, time
from pathlib import Path
from fleet_goodput.core.config import load_settings
from fleet_goodput.importers.common import Options
from fleet_goodput.importers.slurm import convert
options = Options(accelerators=frozenset(load_settings(None).accelerators))
started = time.perf_counter()
imported = convert(Path(sys.argv[1]), options)
seconds = time.perf_counter() - started
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(peak // 1024, round(seconds, 1), len(imported.rejections), len(imported.streams["scheduler"]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--kind", nargs="+", default=["one-row", "cpu-only", "jobs"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.kind:
            path = Path(folder) / "sacct.txt"
            started = time.perf_counter()
            rows = generate(path, kind, args.mib << 20)
            made = time.perf_counter() - started
            done = subprocess.run(
                [sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, check=True
            )
            peak_mib, seconds, rejected, events = done.stdout.split()
            print(
                f"{kind:>9}: {path.stat().st_size >> 20:,} MiB, {rows:,} rows (made in {made:.0f} s): peak "
                f"{int(peak_mib):,} MiB, {seconds} s, {int(rejected):,} rejected, {int(events):,} events"
            )
            path.unlink()


if __name__ == "__main__":
    main()
