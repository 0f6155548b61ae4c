"""Whether a profiler sample is plausible: a step of at most a day, FLOPs the chips' peak allows."""

from __future__ import annotations

from fleet_goodput.core.config import DEFAULT_PRECISION, peak_of
from fleet_goodput.core.events import Sample

# A profiler sample is judged against the peak its ideal chip-time will be
# measured with: its precision's, bf16 where it names none (docs/metric.md
# section 3, "The peak a sample is measured against"). Its FLOPs in its own
# duration on its own chips may reach that peak, never pass it: a sample above
# it would make PG and MPG above 1. The margin is float rounding only.
PEAK_TOLERANCE = 1e-9
# Every such rejection's reason says this, so the headline can count them.
ABOVE_PEAK = "more FLOPs than the chips' peak allows"
# No training or serving step lasts a day; a longer one is a unit error.
MAX_PLAUSIBLE_STEP_S = 86_400


def implausible_sample(sample: Sample, peak_flops: dict[str, float], accelerator: str) -> str | None:
    """Why `sample`, from a job on `accelerator`, cannot be taken (None: it can)."""
    if sample.duration_s > MAX_PLAUSIBLE_STEP_S:
        return f"duration_s {sample.duration_s:g} for one step is more than a day: not plausible"
    peak = peak_of(peak_flops, accelerator, sample.precision)
    if peak is None:  # no peak for its precision on this part: its ideal stays unknown, never guessed
        return None
    implied_pg = sample.ideal_flops / (peak * sample.chips * sample.duration_s)
    if implied_pg <= 1 + PEAK_TOLERANCE:
        return None
    causes = "FLOPs of more chips than it gives, or a duration in the wrong unit"
    if sample.precision is None:
        against, causes = (
            f"{DEFAULT_PRECISION} peak (the sample names no precision)",
            f"a faster precision the sample does not name, {causes}",
        )
    else:
        against = f"{sample.precision} peak"
    return (
        f"ideal_flops {sample.ideal_flops:g} over {sample.chips} chips in {sample.duration_s:g} s implies "
        f"PG {implied_pg:.3g} against the {accelerator} {against}: {ABOVE_PEAK} ({causes})"
    )
