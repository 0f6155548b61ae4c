"""Checkpoint-interval advice from measured chip-time (docs/metric.md section 5).

With checkpoint interval C, blocking save cost s, mean run time between
disruptions M and time to resume t_rm, Young/Daly's steady state gives

    RG(C) ≈ (1 - s/C) (M - C/2) / (M + t_rm),   best at   C* ≈ √(2 s M).

Per job class, from the jobs' whole lives:

- disruptions D (`jobs.disruptions`, counted by each job's timeline): running
  attempts cut by a PREEMPT below the request or a FAIL, and runtime
  restarts inside an allocation (fleet_goodput/core/timeline.py);
- M = all-allocated time / D and t_rm = checkpoint_restore time / D (measured);
- with n saves completed (`jobs.checkpoint_saves`, counted by each job's
  timeline): C = productive step time / n (the steps the saves preserved)
  and s = save time / n;
- where the class completed no save (telemetry without checkpoint events,
  such as some imported traces), C is estimated from lost work: a
  disruption throws away half an interval of steps on average, so
  C ≈ 2 · lost / D, and s ≈ save time · C / step time.

The recovered chip-hours are all-allocated chip-hours × (RG(C*) − RG(C)).
With no disruption there is no M: the advice is then to keep the interval.
Pure arithmetic, no database: tested directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ClassMeasures:
    """Sums over one class of training jobs; times are wall seconds (chip-seconds / requested chips)."""

    disruptions: int
    save_s: float
    lost_s: float
    step_s: float  # productive + lost + pending: all step time
    productive_s: float  # step time a save (or the finish) preserved
    restore_s: float
    all_allocated_s: float
    all_allocated_chip_s: float
    saves: int | None = None  # checkpoint saves completed (jobs.checkpoint_saves)


@dataclass(frozen=True)
class Advice:
    disruptions: int
    interval_source: str  # "measured saves", "estimated from lost time" or "none"
    save_cost_s: float | None  # s
    interval_s: float | None  # C now
    mtbf_s: float | None  # M
    resume_s: float | None  # t_rm
    best_interval_s: float | None  # C*
    rg_now: float | None  # the model's RG at C now
    rg_best: float | None  # at C*
    recoverable_chip_h: float  # all-allocated chip-hours x (RG(C*) - RG(C now)), at least 0
    save_overhead: float | None  # checkpoint_save / step time, measured
    advice: str

    def as_row(self) -> dict:
        return dict(vars(self))


def model_rg(interval_s: float, save_cost_s: float, mtbf_s: float, resume_s: float) -> float:
    """docs/metric.md section 5's steady-state RG (the checkpoint-related part), 0 where the model breaks down."""
    if interval_s <= 0 or interval_s >= 2 * mtbf_s:
        return 0.0
    return max(0.0, (1 - save_cost_s / interval_s) * (mtbf_s - interval_s / 2) / (mtbf_s + resume_s))


def best_interval(save_cost_s: float, mtbf_s: float) -> float:
    return math.sqrt(2 * save_cost_s * mtbf_s)


def advise(m: ClassMeasures) -> Advice:
    overhead = m.save_s / m.step_s if m.step_s > 0 else None
    if m.saves and m.productive_s > 0:
        source, interval, save_cost = "measured saves", m.productive_s / m.saves, m.save_s / m.saves
    elif m.disruptions > 0 and m.lost_s > 0 and m.step_s > 0:
        interval = 2 * m.lost_s / m.disruptions
        source, save_cost = "estimated from lost time", m.save_s * interval / m.step_s
    else:
        source, interval, save_cost = "none", None, None
    if m.disruptions <= 0:
        return Advice(
            m.disruptions,
            source,
            save_cost,
            interval,
            None,
            None,
            None,
            None,
            None,
            0.0,
            overhead,
            "no disruption observed: keep the interval (M cannot be measured)",
        )
    mtbf = m.all_allocated_s / m.disruptions
    resume = m.restore_s / m.disruptions
    if interval is None:
        return Advice(
            m.disruptions,
            source,
            None,
            None,
            mtbf,
            resume,
            None,
            None,
            None,
            0.0,
            overhead,
            "disruptions lost no step time and no save count: keep the interval",
        )
    if save_cost <= 0:
        return Advice(
            m.disruptions,
            source,
            0.0,
            interval,
            mtbf,
            resume,
            None,
            None,
            None,
            0.0,
            overhead,
            "no checkpoint save time measured: checkpoint more often to lose less per disruption",
        )
    best = best_interval(save_cost, mtbf)
    rg_now, rg_best = model_rg(interval, save_cost, mtbf, resume), model_rg(best, save_cost, mtbf, resume)
    recoverable = max(0.0, rg_best - rg_now) * m.all_allocated_chip_s / 3600
    change = best / interval
    if 0.8 <= change <= 1.25:
        text = f"interval is near C* ({_minutes(best)}): keep it"
    else:
        text = (
            f"{'shorten' if change < 1 else 'lengthen'} the interval from ~{_minutes(interval)} to "
            f"~{_minutes(best)}: recovers ~{recoverable:,.1f} chip-h"
        )
    return Advice(
        m.disruptions, source, save_cost, interval, mtbf, resume, best, rg_now, rg_best, recoverable, overhead, text
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
