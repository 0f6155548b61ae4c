"""Benchmark: what reading a training log's lines costs per line (fleet_goodput/importers/log_profiles.py).

The built-in Megatron profile reads a log of Megatron-LM lines (iteration lines
and the rest of a real log's shape: argument listing, checkpoint lines) three
ways, each timed over the same lines, the fastest of `--repeats` kept:

- `Profile.read`: what `mpg import logs` does, RE2 screening the line against
  every pattern in one call, then running the patterns that matched for their
  groups;
- RE2 pattern by pattern: each pattern's `search` on every line;
- the baseline: Python's `re`, pattern by pattern, as the importer read lines
  before it moved to RE2 (fast on ordinary lines, but quadratic on a hostile
  long line and exponential on a user's `(a+)+$`).

Then the hostile line: one line of ` iteration 1/ 10 |` repeated to `--hostile-kb`
KB, under the Megatron iteration pattern, with RE2 and with `re`.

    .venv/bin/python benchmarks/bench_log_lines.py [--lines 100000] [--hostile-kb 50]

Prints µs per line and the ratios; not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import re
import time

from fleet_goodput.importers.log_profiles import load_profiles

# One step's worth of a Megatron-LM log, in the shapes the profile reads and the ones it passes over.
STEP_LINES = (
    " [2026-02-01 10:00:20.500000] iteration        5/      20 | consumed samples:           40 | elapsed time "
    "per iteration (ms): 4000.0 | learning rate: 1.000000E-04 | global batch size:     8 | lm loss: 9.1E+00 |"
    " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "[Rank 0] (after 5 iterations) memory (MB) | allocated: 1234.5 | max allocated: 2345.6 | reserved: 3000.0",
    "  hidden_size ..................................... 4096",
    " [2026-02-01 10:00:24.500000] saving checkpoint at iteration       5 to /ckpt in torch_dist format",
    "    save-checkpoint ................................: (2001.10, 2002.20)",
)


def _fastest(repeats: int, work) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--hostile-kb", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    profile = load_profiles(None)["megatron"]
    lines = [STEP_LINES[n % len(STEP_LINES)] for n in range(args.lines)]
    regexes = [
        profile.timestamp,
        *(r for _, r in profile.precisions),
        *(r for p in profile.lines.values() for r in (p.regex, p.anchor) if r),
    ]
    python_re = [re.compile(r.pattern) for r in regexes]

    def by_pattern(compiled):
        return lambda: [c.search(line) for line in lines for c in compiled]

    read = _fastest(args.repeats, lambda: [profile.read(line) for line in lines])
    re2_each = _fastest(args.repeats, by_pattern(regexes))
    baseline = _fastest(args.repeats, by_pattern(python_re))
    per_line = lambda seconds: seconds / len(lines) * 1e6  # noqa: E731
    print(f"{len(lines):,} lines, {len(regexes)} patterns of the megatron profile, fastest of {args.repeats}:")
    print(f"  Profile.read (RE2 screen)       {per_line(read):6.1f} µs/line   {read / baseline:4.2f}x the baseline")
    print(f"  RE2 pattern by pattern          {per_line(re2_each):6.1f} µs/line   {re2_each / baseline:4.2f}x")
    print(f"  baseline: re pattern by pattern {per_line(baseline):6.1f} µs/line")

    hostile = " iteration 1/ 10 |" * (args.hostile_kb * 1000 // 18)
    iteration = profile.lines["iteration"].regex
    with_re2 = _fastest(1, lambda: iteration.search(hostile))
    with_re = _fastest(1, lambda: re.compile(iteration.pattern).search(hostile))
    print(
        f"one hostile {len(hostile) / 1000:,.0f} KB line under the iteration pattern: RE2 {with_re2 * 1e3:.1f} ms, "
        f"re {with_re * 1e3:,.0f} ms ({with_re / with_re2:,.0f}x; re grows with the square of the length)"
    )


if __name__ == "__main__":
    main()
