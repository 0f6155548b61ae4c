"""Chip-time printed in the unit its size reads best in: chip-s, chip-min or chip-h.

A job of a few chips for a few minutes holds a few chip-minutes: in chip-hours to one decimal it
printed as 0.0, as if nothing had happened. A figure of an hour or more reads in chip-hours, of a
minute or more in chip-minutes, and a smaller one in chip-seconds. A table column takes the unit
of its largest figure, so that its rows compare at a glance.
"""

from __future__ import annotations

from collections.abc import Iterable

# (unit, chip-seconds in one), largest first.
UNITS = (("chip-h", 3600.0), ("chip-min", 60.0), ("chip-s", 1.0))


def unit_of(chip_s: float) -> tuple[str, float]:
    """The unit a figure of `chip_s` chip-seconds reads in, and its size in chip-seconds."""
    return next((unit, size) for unit, size in UNITS if abs(chip_s) >= size or size == 1.0)


def chip_time(chip_s: float | None, digits: int | None = 1) -> str:
    """`chip_s` chip-seconds in the unit of its size ("12.5 chip-min"); n/a where unknown. `digits` None:
    one decimal below 100 of the unit, none from 100 ("6,347 chip-h")."""
    if chip_s is None:
        return "n/a"
    unit, size = unit_of(float(chip_s))  # DuckDB gives sums of decimals as Decimal
    value = float(chip_s) / size
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1
    return f"{value:,.{digits}f} {unit}"


def column_unit(chip_s_values: Iterable[float | None]) -> tuple[str, float]:
    """The unit a column of chip-second figures reads in: its largest figure's."""
    return unit_of(max((abs(float(value)) for value in chip_s_values if value is not None), default=0.0))
