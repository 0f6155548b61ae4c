"""The figure vector: a job's chip-time per category and the further figures, in one list per window.

Integer chip-microseconds (sums exact in any order) and, last, ideal chip-seconds (the one float).
JobTimeline (fleet_goodput/core/timeline.py) fills it; the pipelines, the store and the reports read
it by these names.
"""

from __future__ import annotations

# Chip-time categories of a job's lifetime, in the order of the metric vector.
CATEGORIES = (
    "queued",
    "partial",
    "productive",
    "pending",
    "lost",
    "data_wait",
    "compile",
    "checkpoint_save",
    "checkpoint_restore",
    "init",
    "idle",
)
ALL_ALLOCATED = CATEGORIES[2:]
# Further integer chip-microsecond figures carried in the same vector. The two
# totals are accumulated on their own, not summed from the categories, so that
# conservation (docs/metric.md section 3) is a check with teeth rather than a tautology.
EXTRA_FIGURES = ("lifetime", "all_allocated", "held", "partial_held", "clipped_runtime", "profiled_productive")
FIGURES = CATEGORIES + EXTRA_FIGURES
IDEAL = len(FIGURES)  # index of ideal chip-seconds, the one float in the vector

MICROS = 1_000_000


def zero_vector() -> list:
    return [0] * IDEAL + [0.0]
