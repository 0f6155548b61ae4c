"""Combining chip-time deltas into one row per job and window.

A batch run emits one delta per (job, window); a streaming run emits several
as a window's step time resolves, so the combine is what makes both correct.
"""

from __future__ import annotations

import apache_beam as beam

from fleet_goodput.timeline import FIGURES, IDEAL, zero_vector

MICROS = 1_000_000


class VectorSumFn(beam.CombineFn):
    """Element-wise sum of metric vectors (integers exact, ideal a float)."""

    def create_accumulator(self):
        return zero_vector()

    def add_input(self, accumulator, vector):
        for i, value in enumerate(vector):
            accumulator[i] += value
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def compact(self, accumulator):
        return accumulator

    def extract_output(self, accumulator):
        return accumulator


def to_job_window_row(keyed_vector) -> dict:
    """((job_id, window_start_us), vector) → a `job_window` table row in chip-seconds."""
    (job_id, window_start_us), vector = keyed_vector
    row = {"job_id": job_id, "window_start_us": window_start_us}
    for i, figure in enumerate(FIGURES):
        row[f"{figure}_chip_s"] = vector[i] / MICROS
    row["ideal_chip_s"] = vector[IDEAL]
    return row


class ComputeGoodput(beam.PTransform):
    """Per (job, window) deltas → `job_window` rows."""

    def expand(self, window_deltas):
        return (
            window_deltas
            | "SumPerJobWindow" >> beam.CombinePerKey(VectorSumFn())
            | "ToRows" >> beam.Map(to_job_window_row)
        )
