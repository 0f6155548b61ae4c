"""The accelerator catalogue (configs/accelerators.yaml): every part the importers
map to has peaks per precision with a public source, and the peak lookup the
pipeline carries gives each sample the peak of its own precision."""

from __future__ import annotations

import pytest

from fleet_goodput.core.config import (
    PRECISIONS,
    ConfigError,
    load_catalogue,
    load_settings,
    part_key,
    part_names,
    peak_of,
    peak_table,
)
from fleet_goodput.core.events import PROFILE, make_event
from fleet_goodput.core.figure_vector import IDEAL
from fleet_goodput.core.timeline import JobTimeline

CATALOGUE = load_settings().accelerators

# Accelerators of the current MLPerf Training and Inference results and the TPU generations.
REQUIRED = (
    "gb300",
    "b300",
    "gb200",
    "b200",
    "h200",
    "h100",
    "gh200",
    "l40s",
    "l4",
    "rtx-pro-6000",
    "mi300x",
    "mi325x",
    "mi350x",
    "mi355x",
    "gaudi2",
    "gaudi3",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
    "tpu-v6e",
    "tpu-v7",
)


@pytest.mark.parametrize("key", REQUIRED)
def test_catalogue_covers_current_accelerators_with_a_public_source(key):
    part = CATALOGUE[key]
    assert part.url.startswith("https://") and part.source
    assert set(part.peak_flops) <= set(PRECISIONS) and part.peak_bf16_flops > 0 and part.hbm_bytes_per_s > 0


def test_lower_precisions_are_never_slower_than_bf16():
    for part in CATALOGUE.values():
        assert all(peak >= part.peak_bf16_flops for peak in part.peak_flops.values()), part.key


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA GB300", "gb300"),
        ("NVIDIA Blackwell Ultra GPU (GB300)", "gb300"),
        ("NVIDIA B300-SXM-270GB", "b300"),
        ("NVIDIA Blackwell Ultra GPU (B300-SXM-288GB)", "b300"),
        ("NVIDIA Blackwell GPU (GB200)", "gb200"),
        ("NVIDIA Blackwell GPU (B200-SXM-180GB)", "b200"),
        ("NVIDIA GH200 Grace Hopper Superchip", "gh200"),
        ("NVIDIA H200-SXM5-141GB", "h200"),
        ("NVIDIA H100-SXM5-80GB", "h100"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA H100-PCIe-80GB", "h100-pcie"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA RTX Pro 6000 SE PCIe 96GB", "rtx-pro-6000"),
        ("AMD Instinct MI355X", "mi355x"),
        ("AMD Instinct MI300X 192GB HBM3", "mi300x"),
        ("Intel Gaudi 2", "gaudi2"),
        ("Intel Gaudi 3", "gaudi3"),
        ("Intel HL-225B (Gaudi2)", "gaudi2"),
        ("TPU v5e", "tpu-v5e"),
        ("TPU-v5p", "tpu-v5p"),
        ("TPU Trillium", "tpu-v6e"),
        ("tpu-v6e", "tpu-v6e"),
        ("TPU7x Ironwood", "tpu-v7"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
    ],
)
def test_mlperf_accelerator_names_map_to_catalogue_keys(name, key):
    assert part_key(part_names(CATALOGUE), name) == key and key in CATALOGUE


def test_peak_lookup_gives_the_samples_precision_and_bf16_when_none():
    table = peak_table(CATALOGUE)
    assert peak_of(table, "h100", None) == peak_of(table, "h100", "bf16") == 989e12
    assert peak_of(table, "h100", "fp8") == 1979e12
    assert peak_of(table, "h100", "fp4") is None  # Hopper has no FP4: the ideal is unknown, not a guess
    assert peak_of({"h100": 989e12}, "h100", None) == 989e12  # a bare bf16 table still works


def test_a_catalogue_entry_without_a_bf16_peak_or_with_an_unknown_precision_is_refused(tmp_path):
    path = tmp_path / "cat.yaml"
    path.write_text("x:\n  peak_flops: {fp8: 1.0e15}\n  hbm_bytes_per_s: 1.0e12\n  source: s\n")
    with pytest.raises(ConfigError, match="needs a bf16 peak"):
        load_catalogue(path)
    path.write_text("x:\n  peak_flops: {bf16: 1.0e15, fp3: 1.0e16}\n  hbm_bytes_per_s: 1.0e12\n  source: s\n")
    with pytest.raises(ConfigError, match="unknown precision"):
        load_catalogue(path)
    path.write_text("x:\n  peak_bf16_flops: 1.0e15\n  hbm_bytes_per_s: 1.0e12\n  source: s\n")
    assert load_catalogue(path)["x"].peak_flops == {"bf16": 1.0e15}  # the older form still loads


def test_ideal_chip_seconds_use_the_peak_of_the_samples_precision():
    """An FP8 sample on an H100 is measured against the FP8 peak (1,979 T), not bf16 (989 T):
    the same FLOPs then give half the ideal time, and PG cannot exceed 1 for a run that
    reaches 60% of the FP8 peak; the same sample naming no precision is more than bf16 allows."""
    t0, second = 1_767_225_600_000_000, 1_000_000
    ideals = {}
    for precision in (None, "fp8", "fp4"):
        events = [
            make_event(t0, "s", "SUBMIT", ("c", "h100", 8, "TRAINING", None, None, None, None)),
            make_event(t0, "a", "ALLOCATE", (8,)),
            make_event(t0, "p", PROFILE, (1, 1.0, 8, 0.6 * 8 * 1979e12, "ANALYTIC", precision)),
            make_event(t0, "r1", "STEP_START", (1,)),
            make_event(t0 + 10 * second, "r2", "STEP_END", (10,)),
            make_event(t0 + 10 * second, "f", "FINISH", ()),
        ]
        timeline = JobTimeline("j", 3600 * second, peak_table(CATALOGUE))
        timeline.feed(events)
        timeline.close(t0 + 10 * second)
        ideals[precision] = sum(vector[IDEAL] for vector in timeline.flush().values())
    assert ideals["fp8"] == pytest.approx(10 * 0.6 * 8)  # PG 0.6 of 80 productive chip-s
    # Naming no precision, it is judged against bf16, where it claims PG 1.2: rejected, the span unprofiled
    # (docs/metric.md, "The peak a sample is measured against"), never an ideal above the productive time.
    assert ideals[None] == 0
    assert ideals["fp4"] == 0  # no FP4 peak on Hopper: no ideal, the span stays unprofiled
