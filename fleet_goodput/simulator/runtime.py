"""What a job's runtime does once it holds all its chips: one attempt at a time.

An attempt is planned forward from its full allocation (init, compile,
restore, then step / data-wait / checkpoint spans one after another, never
overlapping) up to the first instant it might be stopped, then cut where the
scheduler actually stopped it. Cutting also decides the fate of every step
span (docs/metric.md section 3): productive once preserved, lost on a disruption,
pending at the horizon.

Same-instant rule, which the pipeline applies too: at one timestamp runtime
*_END events come before scheduler events and *_START events after them. So
a span ending exactly when the job is stopped has ended, and a span starting
then never starts.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from fleet_goodput.simulator.timeline import (
    CHECKPOINT_RESTORE,
    CHECKPOINT_SAVE,
    COMPILE,
    DATA_WAIT,
    INIT,
    LOST,
    PENDING,
    PRODUCTIVE,
    STEP,
    JobSpec,
    Sample,
    Span,
)

# How the attempt ends, which decides what becomes of unresolved step time.
FINISH = "finish"  # the job completed: every step so far is preserved
DISRUPT = "disrupt"  # preempted, failed or cancelled: unpreserved steps are lost
HORIZON = "horizon"  # still running when the simulation stops: unresolved steps are pending

# Profile the first steps of an attempt, then every Nth span, as a sampling profiler would.
SAMPLE_FIRST_SPANS = 2
SAMPLE_EVERY_SPANS = 40


@dataclass
class Progress:
    """What survives from one attempt to the next."""

    attempt: int = 0  # restart count
    durable_step: int = 0  # TRAINING: the last checkpointed step (0: none yet)
    kept_step: int = 0  # SERVING, BULK_INFERENCE: the last completed step


@dataclass
class Plan:
    spans: list[Span]
    finish_us: int | None  # when the job would finish, if before the planning limit


def plan_attempt(spec: JobSpec, progress: Progress, allocated_us: int, limit_us: int, rng: random.Random) -> Plan:
    """The spans of one attempt from its full allocation, planned until `limit_us` or the job's end.

    A span starting before the limit is planned whole even if it runs past it;
    `close_attempt` cuts it wherever the attempt really stops.
    """
    spans: list[Span] = []
    t = allocated_us + (0 if rng.random() < 0.5 else _ms(rng.uniform(500, 20000)))  # container start-up: idle

    def add(kind: str, duration_us: int, first: int | None = None, last: int | None = None) -> None:
        nonlocal t
        spans.append(Span(kind, t, t + duration_us, progress.attempt, first_step=first, last_step=last))
        t += duration_us

    training = spec.workload == "TRAINING"
    restarted = progress.attempt > 0
    add(INIT, _jitter(rng, spec.init_us, 0.2))
    add(COMPILE, _jitter(rng, spec.recompile_us if restarted else spec.compile_us, 0.2))
    if training and restarted and progress.durable_step > 0:
        add(CHECKPOINT_RESTORE, _jitter(rng, spec.checkpoint_restore_us, 0.2), first=progress.durable_step)
    next_step = (progress.durable_step if training else progress.kept_step) + 1
    step_spans = 0
    while t < limit_us and not _done(spec, next_step, t):
        if rng.random() < spec.data_wait_prob:
            add(DATA_WAIT, _ms(math.exp(rng.gauss(math.log(5), 1.0)) * 1000))
        count = spec.steps_per_span
        if spec.total_steps is not None:
            count = min(count, spec.total_steps - next_step + 1)
        # Occasional stragglers (a slow host, a GC pause) make steps uneven.
        slowdown = rng.uniform(1.3, 2.0) if rng.random() < 0.03 else 1.0
        add(STEP, _jitter(rng, count * spec.step_us * slowdown, 0.04), first=next_step, last=next_step + count - 1)
        spans[-1].sampled = spec.profiled and (step_spans < SAMPLE_FIRST_SPANS or step_spans % SAMPLE_EVERY_SPANS == 0)
        step_spans += 1
        next_step += count
        last = next_step - 1
        final = spec.total_steps is not None and last >= spec.total_steps
        if training and (last % spec.checkpoint_every == 0 or (final and rng.random() < 0.7)):
            add(CHECKPOINT_SAVE, _jitter(rng, spec.checkpoint_save_us, 0.2), last=last)
        if rng.random() < 0.1:  # host-side gap between spans: idle
            t += _ms(rng.uniform(100, 3000))
    finish_us = None
    if _done(spec, next_step, t):
        finish_us = t + _ms(rng.uniform(1000, 30000))  # teardown after the last span
        if finish_us >= limit_us:
            finish_us = None
    return Plan(spans, finish_us)


def close_attempt(
    spec: JobSpec, progress: Progress, plan: Plan, end_us: int, how: str
) -> tuple[list[Span], list[Sample]]:
    """Cut the plan at `end_us`, resolve its step spans, and advance `progress`.

    Returns the spans that happened and the profiler samples taken.
    """
    kept: list[Span] = []
    for span in plan.spans:
        if span.start_us >= end_us:
            break
        # Nothing is emitted at or after the horizon, so a span ending exactly there is cut.
        span.ended = span.stop_us < end_us if how == HORIZON else span.stop_us <= end_us
        span.stop_us = min(span.stop_us, end_us)
        kept.append(span)

    training = spec.workload == "TRAINING"
    unresolved: list[Span] = []
    samples: list[Sample] = []
    for span in kept:
        if span.kind == STEP:
            if not span.ended:
                span.outcome = LOST if how == DISRUPT else PENDING if how == HORIZON else PRODUCTIVE
            elif training:
                unresolved.append(span)
            else:  # serving and batch inference keep their output as soon as a step ends
                span.outcome = PRODUCTIVE
                progress.kept_step = span.last_step
            if span.ended and span.sampled:
                steps = span.last_step - span.first_step + 1
                measured_s = (span.stop_us - span.start_us) / steps / 1e6
                samples.append(Sample(span.stop_us, span.first_step, measured_s))
        elif span.kind == CHECKPOINT_SAVE and span.ended:
            progress.durable_step = span.last_step
            for step_span in unresolved:
                step_span.outcome = PRODUCTIVE
            unresolved = []
    for span in unresolved:
        span.outcome = {FINISH: PRODUCTIVE, DISRUPT: LOST, HORIZON: PENDING}[how]
    if how == DISRUPT:
        progress.attempt += 1
    return kept, samples


def _done(spec: JobSpec, next_step: int, t: int) -> bool:
    if spec.serve_until_us is not None:
        return t >= spec.serve_until_us
    return next_step > spec.total_steps


def _jitter(rng: random.Random, us: float, sigma: float) -> int:
    return _ms(us / 1000 * math.exp(rng.gauss(0, sigma)))


def _ms(ms: float) -> int:
    """Whole milliseconds, at least one, in microseconds."""
    return max(1, int(round(ms))) * 1000
