"""Turning a job's per-window metric vectors into `job_window` rows.

The sessionizers emit one complete vector per (job, window) and version: in
batch a single version at the as-of time, in streaming a new version each time
a window's figures change. Rows are kept per version; the views read the latest.
"""

from __future__ import annotations

import apache_beam as beam

from fleet_goodput.core.figure_vector import FIGURES, IDEAL, MICROS

_PROFILED_PRODUCTIVE = FIGURES.index("profiled_productive")


def to_job_window_row(result) -> dict:
    """(job_id, window_start_us, version_us, vector) → a `job_window` row in chip-seconds.

    Ideal chip-time is only ever added with the profiled productive time it
    belongs to, so a window without any is one whose ideal is unknown (the job
    has no profiler sample, or nothing productive here has one): null, not 0
    (docs/metric.md section 1, "Unknown and empty factors"). Whether the job has a
    sample at all is the job's, not the window's (it may arrive after the
    window was written): the views make the ideal of a profiled job's window
    without productive time 0 from `jobs.profiler_samples` (`known_ideal`).
    """
    job_id, window_start_us, version_us, vector = result
    row = {"job_id": job_id, "window_start_us": window_start_us, "version_us": version_us}
    for i, figure in enumerate(FIGURES):
        row[f"{figure}_chip_s"] = vector[i] / MICROS
    row["ideal_chip_s"] = vector[IDEAL] if vector[_PROFILED_PRODUCTIVE] else None
    return row


class ComputeGoodput(beam.PTransform):
    """Per (job, window, version) vectors → `job_window` rows in chip-seconds."""

    def expand(self, window_vectors):
        return window_vectors | "ToRows" >> beam.Map(to_job_window_row)
