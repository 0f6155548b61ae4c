"""The figures of a job's metric vector, by name and in order (fleet_goodput/core/timeline.py computes them).

A module of its own so that the store's table definitions (fleet_goodput/store/tables.py), which every
reader of the store imports, name them without importing the timeline and NumPy: `mpg sql` and
`mpg runs` start faster.
"""

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
