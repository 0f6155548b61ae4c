"""Drawing a fleet: clusters, maintenance drains, and the jobs that arrive.

Everything here is decided up front from one seeded `random.Random`, before
the scheduler runs, so a job's size, shape and behaviour do not depend on
what else happened in the fleet.
"""

from __future__ import annotations

import math
import random

from fleet_goodput.core.config import Settings
from fleet_goodput.simulator.timeline import Cluster, JobSpec

SECOND_US = 1_000_000
MINUTE_US = 60 * SECOND_US
HOUR_US = 60 * MINUTE_US

# (accelerator, cluster sizes in chips, training PG on it). The PG levels are
# plausible MFUs: TPUs with XLA sit higher, the newest GPUs lower because their
# peak outruns memory and interconnect for the same model.
TPU_POOLS = (
    ("tpu-v4", (1024, 2048), 0.55),
    ("tpu-v5e", (1024, 2048), 0.50),
    ("tpu-v5p", (2048, 4096), 0.58),
    ("tpu-v6e", (1024, 2048), 0.47),
)
GPU_POOLS = (
    ("h100", (512, 1024, 2048), 0.45),
    ("a100", (512, 1024), 0.50),
    ("b200", (256, 512, 1024), 0.38),
    ("mi300x", (256, 512), 0.33),
)
REGIONS = ("us-central1", "us-east5", "europe-west4", "asia-northeast1", "us-west4")

WORKLOADS = ("TRAINING", "SERVING", "BULK_INFERENCE")
WORKLOAD_WEIGHTS = (0.55, 0.20, 0.25)
# Program goodput of a workload relative to training on the same chips: serving
# runs small, memory-bound batches; bulk inference batches better.
WORKLOAD_PG = {"TRAINING": 1.0, "SERVING": 0.3, "BULK_INFERENCE": 0.7}
PG_RANGE = {"TRAINING": (0.25, 0.65), "SERVING": (0.05, 0.30), "BULK_INFERENCE": (0.15, 0.45)}
# Largest job of a workload, as a share of its cluster; serving replicas are small.
MAX_SHARE = {"TRAINING": 0.25, "SERVING": 1 / 32, "BULK_INFERENCE": 1 / 8}
# Tail exponent of log2(size): smaller is heavier. Training has the big runs.
SIZE_DECAY = {"TRAINING": 0.45, "SERVING": 0.7, "BULK_INFERENCE": 0.6}

TEAMS = ("llm-pretrain", "search-ranking", "ads", "speech", "vision", "research", "assistant", "recsys")
TEAM_WEIGHTS = (3, 2, 2, 1, 1, 2, 2, 1)

# Share of jobs that arrive in the first minutes: the fleet does not start empty.
INITIAL_SHARE = 0.25
# A steady fleet starts instead with this many hours' worth of its job rate:
# a share of the whole count makes a longer simulation denser (its first days
# drain a bigger backlog), a backlog sized by the rate is the same at any
# length. It stands in for the jobs a fleet running for ever would hold, more
# than the mean job's few hours because the long jobs hold on. Chosen from the
# events of 5-22 seeds at 18 and 54 jobs an hour: with 12 h their first 32 h
# were 3% sparser than days 4-7, with 14 h 0-6% denser.
STEADY_BACKLOG_HOURS = 13
DEFAULT_JOBS_PER_HOUR = 54


def make_clusters(rng: random.Random, settings: Settings, jobs_per_hour: float) -> list[Cluster]:
    """3 to 5 clusters, one accelerator generation each, TPUs and GPUs mixed.

    A fleet given fewer jobs an hour than the default is built smaller in
    proportion, so that a small test fleet still queues, packs and preempts
    like a busy one instead of idling.
    """
    # Job sizes shrink with their cluster too, so capacity shrinks faster than
    # the job rate to keep the load about the same.
    scale = min(1.0, jobs_per_hour / DEFAULT_JOBS_PER_HOUR) ** 2
    tpus = [p for p in TPU_POOLS if p[0] in settings.accelerators]
    gpus = [p for p in GPU_POOLS if p[0] in settings.accelerators]
    count = rng.randint(3, 5)
    n_tpu = min(len(tpus), rng.randint(1, 2))
    pools = rng.sample(tpus, n_tpu) + rng.sample(gpus, min(len(gpus), count - n_tpu))
    regions = rng.sample(REGIONS, len(pools))
    return [
        Cluster(name=f"{region}-{key}", accelerator=key, capacity=_scaled(rng.choice(sizes), scale), region=region)
        for (key, sizes, _pg), region in zip(pools, regions)
    ]


def jobs_per_hour(jobs: int | None, hours: float) -> float:
    return DEFAULT_JOBS_PER_HOUR if jobs is None else jobs / hours


def _scaled(capacity: int, scale: float) -> int:
    """`capacity` times `scale`, as a power of two of at least 32 chips."""
    return max(32, 2 ** round(math.log2(capacity * scale)))


def make_capacity(
    rng: random.Random, clusters: list[Cluster], start_us: int, horizon_us: int
) -> dict[str, list[tuple[int, int]]]:
    """Capacity levels per cluster: full at the start, and a maintenance drain in one or two clusters."""
    levels = {c.name: [(start_us, c.capacity)] for c in clusters}
    span_us = horizon_us - start_us
    for cluster in rng.sample(clusters, min(len(clusters), rng.randint(1, 2))):
        drain_us = start_us + _whole_seconds(rng.uniform(0.3, 0.7) * span_us)
        back_us = drain_us + _whole_seconds(rng.uniform(0.05, 0.2) * span_us)
        drained = cluster.capacity - cluster.capacity // rng.choice((4, 8))
        levels[cluster.name].append((drain_us, drained))
        if back_us < horizon_us:
            levels[cluster.name].append((back_us, cluster.capacity))
    return levels


# Node failures (opt-in, `simulate(node_failures=True)`): each host of HOST_CHIPS chips fails on average
# once every HOST_MTBF_H hours, for a repair of REPAIR_H hours (uniform), with one of these causes.
HOST_CHIPS = 8
HOST_MTBF_H = 24 * 30
REPAIR_H = (0.5, 4.0)
FAILURE_CAUSES = (
    ("xid 79: GPU has fallen off the bus", 4),
    ("uncorrectable ECC errors", 3),
    ("NIC link down", 2),
    ("power supply failure", 1),
)


def add_node_failures(
    seed: int, clusters: list[Cluster], capacity: dict[str, list[tuple[int, int]]], start_us: int, horizon_us: int
) -> dict[str, dict[int, str]]:
    """Hosts failing and repaired, as capacity lost and regained: lowers `capacity`'s levels in place
    and returns, per cluster, the reason of each level that a failure or a repair set. Drawn from a
    generator of its own, so a fleet without failures draws what it always drew."""
    rng = random.Random(f"{seed}:node-failures")
    causes, weights = zip(*FAILURE_CAUSES)
    reasons: dict[str, dict[int, str]] = {}
    for cluster in clusters:
        deltas = _deltas(capacity[cluster.name])
        hosts, time_us = max(1, cluster.capacity // HOST_CHIPS), start_us
        while True:
            time_us += _whole_seconds(rng.expovariate(hosts / HOST_MTBF_H) * 3600 * 1_000_000)
            if time_us >= horizon_us:
                break
            cause = rng.choices(causes, weights)[0]
            repaired_us = time_us + _whole_seconds(rng.uniform(*REPAIR_H) * 3600 * 1_000_000)
            deltas[time_us] = deltas.get(time_us, 0) - HOST_CHIPS
            reasons.setdefault(cluster.name, {})[time_us] = f"NODE_FAIL: {cause}"
            if repaired_us < horizon_us:
                deltas[repaired_us] = deltas.get(repaired_us, 0) + HOST_CHIPS
                reasons[cluster.name].setdefault(repaired_us, f"REPAIRED: {cause}")
        capacity[cluster.name] = _levels(deltas)
    return reasons


def _deltas(levels: list[tuple[int, int]]) -> dict[int, int]:
    deltas, before = {}, 0
    for time_us, chips in levels:
        deltas[time_us] = deltas.get(time_us, 0) + chips - before
        before = chips
    return deltas


def _levels(deltas: dict[int, int]) -> list[tuple[int, int]]:
    levels, level = [], 0
    for time_us, delta in sorted(deltas.items()):
        level += delta
        if delta or not levels:
            levels.append((time_us, max(0, level)))
    return levels


def make_jobs(
    rng: random.Random,
    clusters: list[Cluster],
    settings: Settings,
    start_us: int,
    horizon_us: int,
    jobs: int | None,
    *,
    steady: bool = False,
) -> list[JobSpec]:
    """Job arrivals: a Poisson process conditioned on the count, so `jobs` is exact.

    Given the count, Poisson arrival times are independent and uniform, which
    lets `--jobs N` mean N jobs without a second code path. By default a share
    of them arrives in the first minutes. A `steady` fleet has all of them
    arrive evenly and starts with a backlog on top: `STEADY_BACKLOG_HOURS` of
    the same hourly rate, so its events per hour do not depend on its length.
    """
    span_us = horizon_us - start_us
    count = jobs if jobs is not None else max(1, round(DEFAULT_JOBS_PER_HOUR * span_us / HOUR_US))
    if steady:
        n_initial = round(count * STEADY_BACKLOG_HOURS * HOUR_US / span_us)
        count += n_initial
    else:
        n_initial = round(count * INITIAL_SHARE)
    early_us = min(10 * MINUTE_US, span_us // 2)
    arrivals = sorted(
        [start_us + rng.randrange(0, early_us, 1000) for _ in range(n_initial)]
        + [start_us + rng.randrange(0, span_us, 1000) for _ in range(count - n_initial)]
    )
    # Bigger clusters get more jobs, but not proportionally: small clusters are busy too.
    weights = [c.capacity**0.6 for c in clusters]
    pg_of = {key: pg for key, _sizes, pg in TPU_POOLS + GPU_POOLS}
    specs = []
    for n, submit_us in enumerate(arrivals):
        cluster = rng.choices(clusters, weights)[0]
        workload = rng.choices(WORKLOADS, WORKLOAD_WEIGHTS)[0]
        specs.append(
            _make_job(
                rng,
                f"job-{n:05d}",
                cluster,
                workload,
                submit_us,
                horizon_us,
                pg_of[cluster.accelerator],
                settings.peak_flops(cluster.accelerator),
            )
        )
    return specs


def _make_job(
    rng: random.Random,
    job_id: str,
    cluster: Cluster,
    workload: str,
    submit_us: int,
    horizon_us: int,
    accelerator_pg: float,
    peak_flops: float,
) -> JobSpec:
    chips = _draw_size(rng, workload, cluster.capacity)
    gpu = not cluster.accelerator.startswith("tpu")
    if workload == "TRAINING":
        step_s = math.exp(rng.uniform(math.log(0.4), math.log(8.0))) * (1 + math.log2(chips) / 12)
        span_target_s = rng.uniform(20, 150)
        run_s = min(200 * 3600, math.exp(rng.gauss(math.log(3 * 3600), 1.2)))
        priority = rng.choices((100, 50, 200), (0.77, 0.15, 0.08))[0]
    elif workload == "SERVING":
        step_s = rng.uniform(0.05, 0.5)  # one batch of requests
        span_target_s = rng.uniform(60, 300)
        run_s = min(200 * 3600, math.exp(rng.gauss(math.log(12 * 3600), 1.0)))
        priority = 200
    else:
        step_s = rng.uniform(0.5, 3.0)
        span_target_s = rng.uniform(60, 240)
        run_s = min(48 * 3600, math.exp(rng.gauss(math.log(3600), 0.8)))
        priority = rng.choices((50, 100), (0.8, 0.2))[0]
    step_us = max(1000, _whole_ms(step_s * SECOND_US))
    steps_per_span = _nice_count(span_target_s / (step_us / SECOND_US))
    span_s = steps_per_span * step_us / SECOND_US
    total_steps = serve_until_us = checkpoint_every = None
    if workload == "SERVING":
        serve_until_us = submit_us + _whole_seconds(run_s * SECOND_US)
    else:
        total_steps = steps_per_span * max(1, round(run_s / span_s))
    if workload == "TRAINING":
        checkpoint_every = steps_per_span * max(1, round(rng.uniform(8, 60) * 60 / span_s))
    size_factor = 1 + math.log2(chips) / 8  # bigger jobs take longer to start and to save
    pg_low, pg_high = PG_RANGE[workload]
    pg = min(pg_high, max(pg_low, accelerator_pg * WORKLOAD_PG[workload] * rng.uniform(0.8, 1.15)))
    # Some jobs carry a bug (out of memory, a bad config) that crashes every
    # attempt soon after it starts; no retry helps, so the scheduler fails them.
    crash_after_us = _whole_ms(rng.uniform(60, 1200) * SECOND_US) if rng.random() < 0.04 else None
    cancel_us = None
    if rng.random() < 0.06:
        cancel_us = submit_us + max(SECOND_US, _whole_ms(rng.expovariate(1 / (1.5 * HOUR_US))))
    return JobSpec(
        job_id=job_id,
        cluster=cluster.name,
        accelerator=cluster.accelerator,
        workload=workload,
        team=rng.choices(TEAMS, TEAM_WEIGHTS)[0],
        framework=_draw_framework(rng, cluster.accelerator),
        topology=_topology(chips, gpu, cluster.accelerator),
        priority=priority,
        requested_chips=chips,
        submit_us=submit_us,
        ready_us=submit_us + _whole_ms(rng.uniform(1, 10) * SECOND_US),
        cancel_us=cancel_us,
        crash_after_us=crash_after_us,
        partial_ok=workload == "TRAINING" and chips >= 16 and rng.random() < 0.6,
        profiled=rng.random() >= 0.1,
        step_us=step_us,
        steps_per_span=steps_per_span,
        total_steps=total_steps,
        serve_until_us=serve_until_us,
        checkpoint_every=checkpoint_every,
        checkpoint_save_us=_whole_ms(rng.uniform(5, 45) * size_factor * SECOND_US),
        checkpoint_restore_us=_whole_ms(rng.uniform(10, 90) * size_factor * SECOND_US),
        init_us=_whole_ms(rng.uniform(20, 180) * size_factor * SECOND_US),
        compile_us=_whole_ms(rng.uniform(40, 600) * (1.0 if workload == "TRAINING" else 0.4) * SECOND_US),
        recompile_us=_whole_ms(rng.uniform(5, 60) * SECOND_US),
        data_wait_prob=rng.uniform(0.02, 0.25) * (2.0 if workload == "BULK_INFERENCE" else 1.0),
        ideal_flops=pg * (step_us / SECOND_US) * chips * peak_flops,
        flops_source=_draw_flops_source(rng, gpu),
        # Arithmetic intensity (FLOPs per byte of HBM traffic): serving is memory bound.
        bytes_per_flop=1 / rng.uniform(20, 60) if workload == "SERVING" else 1 / rng.uniform(120, 400),
    )


def _draw_size(rng: random.Random, workload: str, capacity: int) -> int:
    """A power of two with P(2^k) proportional to 2^(-decay*k): most jobs small, a few huge."""
    max_k = max(0, int(math.log2(max(1, capacity * MAX_SHARE[workload]))))
    weights = [2 ** (-SIZE_DECAY[workload] * k) for k in range(max_k + 1)]
    return 2 ** rng.choices(range(max_k + 1), weights)[0]


def _draw_framework(rng: random.Random, accelerator: str) -> str:
    if accelerator.startswith("tpu"):
        return rng.choices(("jax", "pytorch-xla", "tensorflow"), (0.75, 0.2, 0.05))[0]
    if accelerator.startswith("mi"):
        return rng.choices(("pytorch", "jax"), (0.9, 0.1))[0]
    return rng.choices(("pytorch", "jax", "tensorflow"), (0.75, 0.2, 0.05))[0]


def _draw_flops_source(rng: random.Random, gpu: bool) -> str:
    # XLA exposes the unoptimised HLO cost analysis; PyTorch shops mostly count analytically.
    if gpu:
        return rng.choices(("ANALYTIC", "HLO_UNOPTIMIZED", "EXECUTED"), (0.6, 0.25, 0.15))[0]
    return rng.choices(("HLO_UNOPTIMIZED", "ANALYTIC", "EXECUTED"), (0.8, 0.15, 0.05))[0]


def _topology(chips: int, gpu: bool, accelerator: str) -> str:
    if gpu:  # nodes x GPUs per node
        return f"{max(1, chips // 8)}x{min(chips, 8)}"
    dims = [1, 1, 1] if accelerator in ("tpu-v4", "tpu-v5p") else [1, 1]
    for i in range(int(math.log2(chips))):
        dims[i % len(dims)] *= 2
    return "x".join(str(d) for d in sorted(dims))


def _nice_count(steps: float) -> int:
    """Steps per reported span, rounded to what a logger would be configured with."""
    nice = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000)
    return min(nice, key=lambda n: abs(math.log(n) - math.log(max(1.0, steps))))


def _whole_ms(us: float) -> int:
    return max(1000, int(round(us / 1000)) * 1000)


def _whole_seconds(us: float) -> int:
    return int(round(us / SECOND_US)) * SECOND_US
