"""`simulate()`: draw a fleet, run it, write its telemetry and its ground truth.

    from fleet_goodput.simulator import simulate
    summary = simulate("out/sim", seed=7, hours=6, jobs=40)

Writes DIR/{scheduler,runtime,profiler}/part-NNNNN.avro and DIR/truth/
(job_window.parquet, jobs.parquet, capacity_window.parquet, truth.json).
Deterministic for a seed: no global RNG, no wall clock.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fleet_goodput.core.config import Settings, load_settings
from fleet_goodput.simulator import emit, fleet, scheduler, truth
from fleet_goodput.simulator.timeline import Cluster

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class SimulationSummary:
    out_dir: Path
    seed: int
    hours: float
    start_us: int
    as_of_us: int  # the horizon, which is also the latest event time written
    clusters: tuple[Cluster, ...]
    jobs: int
    status_counts: dict[str, int]
    events: dict[str, int]  # stream -> events written
    files: dict[str, list[Path]] = field(default_factory=dict)  # stream or truth table -> paths

    def __str__(self) -> str:
        streams = ", ".join(f"{n} {stream}" for stream, n in self.events.items())
        return (
            f"{self.jobs} jobs on {len(self.clusters)} clusters; events: {streams}; truth in {self.out_dir / 'truth'}"
        )

    def describe(self) -> str:
        """A few lines saying what was written and where."""
        lines = [f"simulated {self.hours:g} h of {len(self.clusters)} clusters (seed {self.seed}) into {self.out_dir}"]
        for c in self.clusters:
            lines.append(f"  cluster {c.name}: {c.capacity} x {c.accelerator}")
        statuses = ", ".join(f"{n} {s.lower()}" for s, n in sorted(self.status_counts.items()))
        lines.append(f"  jobs: {self.jobs} ({statuses})")
        for stream, count in self.events.items():
            lines.append(f"  {stream}: {count} events in {len(self.files[stream])} files under {self.out_dir / stream}")
        lines.append(f"  truth: {self.out_dir / 'truth'} (job_window, jobs, capacity_window parquet; truth.json)")
        return "\n".join(lines)


def simulate(
    out_dir,
    *,
    seed: int = 0,
    hours: float = 24.0,
    jobs: int | None = None,
    steady: bool = False,
    start_us: int = START_US,
    window_s: int = 3600,
    settings: Settings | None = None,
    node_failures: bool = False,
) -> SimulationSummary:
    """Simulate `hours` of a fleet from `start_us` and write events and truth under `out_dir`.

    `jobs` fixes the number of jobs (otherwise `fleet.DEFAULT_JOBS_PER_HOUR` an hour). Jobs still
    running at the horizon are cut there: nothing is emitted after it, and a
    CAPACITY restatement lands exactly on it.

    By default a quarter of the jobs arrive in the first ten minutes, so the
    longer the simulation, the busier its first days. `steady=True` keeps the
    fleet as busy at every length, for comparing inputs of different sizes:
    the `jobs` arrive evenly, and `fleet.STEADY_BACKLOG_HOURS` hours' worth
    of them (at the same hourly rate) come on top in the first ten minutes.

    `node_failures=True` adds hosts failing and being repaired (`fleet.add_node_failures`): capacity
    lost and regained, CAPACITY events and the preemptions they cause saying why
    (`NODE_FAIL: xid 79: GPU has fallen off the bus`, `REPAIRED: ...`).
    """
    if hours <= 0:
        raise ValueError(f"hours must be positive (got {hours})")
    if jobs is not None and jobs < 0:
        raise ValueError(f"jobs must not be negative (got {jobs})")
    settings = settings or load_settings()
    out_dir = Path(out_dir)
    horizon_us = start_us + int(round(hours * 3600)) * 1_000_000
    rng = random.Random(f"{seed}:fleet")
    clusters = fleet.make_clusters(rng, settings, fleet.jobs_per_hour(jobs, hours))
    capacity = fleet.make_capacity(rng, clusters, start_us, horizon_us)
    specs = fleet.make_jobs(rng, clusters, settings, start_us, horizon_us, jobs, steady=steady)
    reasons = fleet.add_node_failures(seed, clusters, capacity, start_us, horizon_us) if node_failures else {}
    timeline = scheduler.run_fleet(seed, clusters, capacity, specs, start_us, horizon_us, reasons)

    streams = {
        "scheduler": emit.scheduler_events(timeline),
        "runtime": emit.runtime_events(timeline),
        "profiler": emit.profiler_events(timeline),
    }
    counts = {stream: len(events) for stream, events in streams.items()}
    # The simulated scheduler saw every cluster over the whole simulated period, and says so.
    observed = {cluster.name: (start_us, horizon_us) for cluster in clusters}
    files = {
        stream: emit.write_stream(out_dir, stream, events, seed, observed if stream == "scheduler" else None)
        for stream, events in streams.items()
    }

    manifest = {
        "seed": seed,
        "hours": hours,
        "start": start_us,
        "as_of": horizon_us,
        "window_s": window_s,
        "jobs": len(specs),
        "events": counts,
    }
    peak = {key: acc.peak_bf16_flops for key, acc in settings.accelerators.items()}
    truth_paths = truth.write_truth(out_dir / "truth", timeline, peak, window_s, manifest)
    files.update({name: [path] for name, path in truth_paths.items()})
    return SimulationSummary(
        out_dir=out_dir,
        seed=seed,
        hours=hours,
        start_us=start_us,
        as_of_us=horizon_us,
        clusters=tuple(clusters),
        jobs=len(specs),
        status_counts=dict(Counter(j.status for j in timeline.jobs)),
        events=counts,
        files=files,
    )
