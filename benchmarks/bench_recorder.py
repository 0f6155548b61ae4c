"""Benchmark: what recording costs a training loop per step (fleet_goodput/telemetry/recorder.py).

The same loop of empty steps runs bare, with `with recorder.step(n):`, and with
a step and a profiler sample each step. Two figures per variant, in µs of CPU
time per step over the bare loop (CPU time, not wall time, so that neighbours
on a shared machine do not count):

- the step's thread: what the training thread itself spends recording (a
  tuple appended to a deque), while the writer thread rolls a file every 0.1 s;
- all-in: the whole process's CPU over the loop and `close()` writing the rest,
  i.e. everything the recorder spends on those steps in either thread
  (building records, encoding Avro with deflate, writing). The writer's share
  runs while a real step waits on its accelerator, outside the step's path;
  it holds the GIL while it runs, so a step bound by Python code pays it.

Each variant runs `--repeats` times and the fastest is kept.

    .venv/bin/python benchmarks/bench_recorder.py

Prints µs per step per variant; not a test, nothing is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from fleet_goodput.telemetry.recorder import Recorder


def bare(steps: int, _recorder: Recorder) -> None:
    for _step in range(steps):
        pass


def with_step(steps: int, recorder: Recorder) -> None:
    for step in range(steps):
        with recorder.step(step):
            pass


def with_step_and_profile(steps: int, recorder: Recorder) -> None:
    for step in range(steps):
        with recorder.step(step):
            pass
        recorder.profile(step, 0.5, 256, 1e15)


def fastest_us_per_step(loop, steps: int, repeats: int) -> tuple[float, float]:
    """(the step's thread, all-in) CPU µs per step, each the fastest of `repeats`."""
    in_thread = all_in = float("inf")
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            recorder = Recorder(folder, "bench", roll_seconds=0.1)
            thread_started, process_started = time.thread_time(), time.process_time()
            loop(steps, recorder)
            thread_looped = time.thread_time()
            recorder.close()
            process_closed = time.process_time()
        in_thread = min(in_thread, thread_looped - thread_started)
        all_in = min(all_in, process_closed - process_started)
    return in_thread / steps * 1e6, all_in / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    baseline, bare_all_in = fastest_us_per_step(bare, args.steps, args.repeats)
    print(f"{args.steps:,} steps, fastest of {args.repeats}; CPU µs per step")
    print(f"  {'bare loop':<24} {baseline:7.3f} µs/step")
    for name, loop in (("with recorder.step(n)", with_step), ("step + profiler sample", with_step_and_profile)):
        in_thread, all_in = fastest_us_per_step(loop, args.steps, args.repeats)
        print(
            f"  {name:<24} {in_thread:7.3f} µs/step   recorder: {in_thread - baseline:6.3f} in the step's thread, "
            f"{all_in - bare_all_in:6.3f} all-in"
        )


if __name__ == "__main__":
    main()
