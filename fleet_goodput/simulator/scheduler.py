"""A discrete-event gang scheduler over the drawn fleet, producing the timeline.

Per cluster a queue ordered by priority then submission. A job starts only
when all its chips are free (gang scheduling); large training jobs may take
part of their chips first and wait for the rest (partial allocation), which
also reserves the cluster for them. A job that waited too long stops smaller
jobs from backfilling past it. High-priority arrivals preempt lower-priority
jobs; maintenance drains evict jobs; hardware failures hit a job at a rate
proportional to its chips (a per-chip MTBF) and either requeue it or, for
some, fail it for good. Preemptions always take a job to 0 chips.

Only events strictly before the horizon happen; at the horizon running
attempts are cut and their unresolved steps stay pending.
"""

from __future__ import annotations

import heapq
import random

from fleet_goodput.simulator import runtime
from fleet_goodput.simulator.fleet import HOUR_US, SECOND_US
from fleet_goodput.simulator.timeline import (
    CANCELLED,
    FAILED,
    FINISHED,
    Cluster,
    FleetTimeline,
    JobSpec,
    JobTimeline,
    LevelChange,
)

# Mean time between failures of one chip (with its share of host, network and
# software); a job on n chips fails n times as often. Shorter than real
# hardware so that a day of a modest fleet shows restarts at all sizes.
CHIP_MTBF_US = 5000 * HOUR_US
TERMINAL_FAILURE_PROB = 0.2  # a failure that is the job's own bug: no retry helps
# The `reason` of the scheduler events, one per cause the simulator knows (docs/metric.md section 2).
REASON_PREEMPTED = "PREEMPTED: a higher-priority job needed the chips"
REASON_MAINTENANCE = "MAINTENANCE: hosts drained"
REASON_HARDWARE = "NODE_FAIL: hardware failure"
REASON_JOB_ERROR = "FAILED: the job's own error"
REASON_CRASH = "FAILED: the job crashed"
REASON_CANCELLED = "CANCELLED by the user"
REASON_COMPLETED = "COMPLETED"
MAX_RESTARTS = 5
RESERVE_AFTER_US = 20 * 60 * SECOND_US  # queue wait after which a job stops backfill past it

# Order of simultaneous simulation events: releases first so that the chips
# they free are seen by whatever else happens at that instant.
_END, _CAPACITY, _CANCEL, _READY = range(4)

_QUEUED, _PARTIAL, _RUNNING, _DONE = "queued", "partial", "running", "done"


class _Job:
    def __init__(self, spec: JobSpec):
        self.spec = spec
        self.timeline = JobTimeline(spec)
        self.progress = runtime.Progress()
        self.state = _QUEUED
        self.held = 0
        self.waiting_since = spec.ready_us
        self.allocated_us = 0
        self.plan: runtime.Plan | None = None
        self.token = 0  # invalidates the planned end of an attempt that was cut short


class _Pool:
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.capacity = cluster.capacity
        self.used = 0
        self.waiting: list[_Job] = []  # queued and ready
        self.holding: list[_Job] = []  # partial or running


def run_fleet(
    seed: int,
    clusters: list[Cluster],
    capacity: dict[str, list[tuple[int, int]]],
    specs: list[JobSpec],
    start_us: int,
    horizon_us: int,
    capacity_reasons: dict[str, dict[int, str]] | None = None,
) -> FleetTimeline:
    """Simulate the fleet from `start_us` to `horizon_us`; returns what happened. `capacity_reasons`
    says which levels a node failure set (the rest are maintenance)."""
    capacity_reasons = capacity_reasons or {}
    sim = _Simulation(seed, clusters, specs, horizon_us)
    for name, levels in capacity.items():
        for time_us, chips in levels[1:]:  # the first level is the cluster's initial capacity
            sim.push(time_us, _CAPACITY, (name, chips, capacity_reasons.get(name, {}).get(time_us)))
    sim.run()
    return FleetTimeline(start_us, horizon_us, clusters, capacity, [job.timeline for job in sim.jobs], capacity_reasons)


class _Simulation:
    def __init__(self, seed: int, clusters: list[Cluster], specs: list[JobSpec], horizon_us: int):
        self.seed = seed
        self.rng = random.Random(f"{seed}:scheduler")
        self.horizon_us = horizon_us
        self.pools = {c.name: _Pool(c) for c in clusters}
        self.jobs = [_Job(spec) for spec in specs]
        self.heap: list[tuple] = []
        self.seq = 0
        for job in self.jobs:
            self.push(job.spec.ready_us, _READY, job)
            if job.spec.cancel_us is not None:
                self.push(job.spec.cancel_us, _CANCEL, job)

    def push(self, time_us: int, order: int, payload, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time_us, order, self.seq, payload, token))

    def run(self) -> None:
        while self.heap and self.heap[0][0] < self.horizon_us:
            t, order, _seq, payload, token = heapq.heappop(self.heap)
            if order == _CAPACITY:
                pool = self.pools[payload[0]]
                self.on_capacity(pool, payload[1], t, payload[2])
            else:
                job = payload
                pool = self.pools[job.spec.cluster]
                if job.state == _DONE:
                    continue
                if order == _END:
                    self.on_attempt_end(job, pool, t, token)
                elif order == _CANCEL:
                    self.end_job(job, pool, t, CANCELLED, REASON_CANCELLED)
                else:
                    self.on_ready(job, pool, t)
            self.schedule(pool, t)
        for job in self.jobs:
            if job.state == _RUNNING:
                self.close(job, self.horizon_us, runtime.HORIZON)

    # --- what happens to one job

    def on_ready(self, job: _Job, pool: _Pool, t: int) -> None:
        job.waiting_since = t
        pool.waiting.append(job)
        if job.spec.priority >= 200 and job.spec.requested_chips > pool.capacity - pool.used:
            self.preempt_for(job, pool, t)

    def on_attempt_end(self, job: _Job, pool: _Pool, t: int, token: int) -> None:
        if token != job.token or job.state != _RUNNING:
            return
        if job.plan.finish_us == t:
            self.end_job(job, pool, t, FINISHED, REASON_COMPLETED)
        elif job.spec.crash_after_us is not None:
            self.end_job(job, pool, t, FAILED, REASON_CRASH)
        elif (own_error := self.rng.random() < TERMINAL_FAILURE_PROB) or job.progress.attempt >= MAX_RESTARTS:
            self.end_job(job, pool, t, FAILED, REASON_JOB_ERROR if own_error else REASON_HARDWARE)
        else:  # the scheduler takes the chips back and retries on healthy ones
            self.preempt(job, pool, t, self._ms(self.rng.uniform(60, 900) * 1000), REASON_HARDWARE)

    def allocate(self, job: _Job, pool: _Pool, chips: int, t: int) -> None:
        job.timeline.levels.append(LevelChange(t, chips, "ALLOCATE"))
        pool.used += chips - job.held
        if job.held == 0:
            pool.waiting.remove(job)
            pool.holding.append(job)
        job.held = chips
        job.allocated_us = t
        if chips < job.spec.requested_chips:
            job.state = _PARTIAL
            return
        job.state = _RUNNING
        job.token += 1
        rng = random.Random(f"{self.seed}:{job.spec.job_id}:{job.progress.attempt}")
        fail_us = t + self._ms(rng.expovariate(job.spec.requested_chips / CHIP_MTBF_US) / 1000)
        if job.spec.crash_after_us is not None:
            fail_us = min(fail_us, t + job.spec.crash_after_us)
        job.plan = runtime.plan_attempt(job.spec, job.progress, t, min(fail_us, self.horizon_us), rng)
        if job.plan.finish_us is not None:
            self.push(job.plan.finish_us, _END, job, job.token)
        elif fail_us < self.horizon_us:
            self.push(fail_us, _END, job, job.token)

    def preempt(self, job: _Job, pool: _Pool, t: int, requeue_delay_us: int, reason: str) -> None:
        if job.state == _RUNNING:
            self.close(job, t, runtime.DISRUPT)
        job.timeline.levels.append(LevelChange(t, 0, "PREEMPT", reason))
        pool.used -= job.held
        pool.holding.remove(job)
        job.held = 0
        job.state = _QUEUED
        job.token += 1
        self.push(t + requeue_delay_us, _READY, job)

    def end_job(self, job: _Job, pool: _Pool, t: int, status: str, reason: str) -> None:
        if job.state == _RUNNING:
            self.close(job, t, runtime.FINISH if status == FINISHED else runtime.DISRUPT)
        if job.held:
            pool.used -= job.held
            pool.holding.remove(job)
        elif job in pool.waiting:
            pool.waiting.remove(job)
        job.held = 0
        job.state = _DONE
        job.timeline.status = status
        job.timeline.end_us = t
        job.timeline.end_reason = reason

    def close(self, job: _Job, t: int, how: str) -> None:
        spans, samples = runtime.close_attempt(job.spec, job.progress, job.plan, t, how)
        job.timeline.spans.extend(spans)
        job.timeline.samples.extend(samples)
        job.plan = None

    # --- what happens to a cluster

    def on_capacity(self, pool: _Pool, chips: int, t: int, reason: str | None) -> None:
        failed = reason is not None and reason.startswith("NODE_FAIL")
        lost = pool.capacity - chips
        pool.capacity = chips
        if failed and pool.used and lost > 0 and self.rng.random() < pool.used / (pool.used + chips):
            # The failed host was busy (as likely as its share of the chips in use): its job dies.
            victim = self.rng.choices(pool.holding, [j.held for j in pool.holding])[0]
            self.preempt(victim, pool, t, self._ms(self.rng.uniform(30, 120) * 1000), reason)
        if pool.used > chips:  # a drain or a failure evicts jobs off the hosts that went
            for victim in self._victims(pool, priority_below=None):
                if pool.used <= chips:
                    break
                self.preempt(
                    victim,
                    pool,
                    t,
                    self._ms(self.rng.uniform(30, 120) * 1000),
                    reason if failed else REASON_MAINTENANCE,
                )

    def preempt_for(self, job: _Job, pool: _Pool, t: int) -> None:
        """Free chips for a high-priority job by preempting lower-priority ones, if that is enough."""
        need = job.spec.requested_chips - (pool.capacity - pool.used)
        chosen = []
        for victim in self._victims(pool, priority_below=job.spec.priority):
            if need <= 0:
                break
            chosen.append(victim)
            need -= victim.held
        if need <= 0:
            for victim in chosen:
                self.preempt(victim, pool, t, self._ms(self.rng.uniform(30, 120) * 1000), REASON_PREEMPTED)

    def _victims(self, pool: _Pool, priority_below: int | None) -> list[_Job]:
        # Partial jobs first (they do no work), then the lowest priority, then the most recently started.
        candidates = [j for j in pool.holding if priority_below is None or j.spec.priority < priority_below]
        return sorted(candidates, key=lambda j: (j.state != _PARTIAL, j.spec.priority, -j.allocated_us, j.spec.job_id))

    def schedule(self, pool: _Pool, t: int) -> None:
        """Hand free chips to waiting jobs, by priority, with backfill until a job has waited too long."""
        free = pool.capacity - pool.used
        partial = [j for j in pool.holding if j.state == _PARTIAL]
        for job in sorted(partial + pool.waiting, key=lambda j: (-j.spec.priority, j.spec.submit_us, j.spec.job_id)):
            need = job.spec.requested_chips - job.held
            if need <= free:
                self.allocate(job, pool, job.spec.requested_chips, t)
                free -= need
            elif job.state == _PARTIAL:
                return  # it holds chips for its gang: nobody behind it gets any
            elif job.spec.partial_ok and not partial and free >= need // 4 and free > 0:
                self.allocate(job, pool, free, t)
                return
            elif t - job.waiting_since >= RESERVE_AFTER_US:
                return

    @staticmethod
    def _ms(ms: float) -> int:
        return max(1, int(round(ms))) * 1000
