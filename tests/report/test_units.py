"""Chip-time in the unit its size reads in (fleet_goodput/report/units.py), in the headline and the report:
a small job's figures once printed as "0.0 chip-h"."""

from __future__ import annotations

import duckdb
import pytest

from fleet_goodput.report import headline
from fleet_goodput.report.render import _ENVIRONMENT
from fleet_goodput.report.units import chip_time, column_unit


@pytest.mark.parametrize(
    "chip_s, shown",
    [
        (None, "n/a"),
        (0, "0.0 chip-s"),
        (45, "45.0 chip-s"),
        (59.96, "60.0 chip-s"),
        (60, "1.0 chip-min"),
        (600, "10.0 chip-min"),
        (3599, "60.0 chip-min"),
        (3600, "1.0 chip-h"),
        (9000, "2.5 chip-h"),
        (36_000_000, "10,000.0 chip-h"),
        (-120, "-2.0 chip-min"),
    ],
)
def test_chip_time_reads_in_the_unit_of_its_size(chip_s, shown):
    assert chip_time(chip_s) == shown


def test_whole_units_from_a_hundred_where_asked():
    assert [chip_time(chip_s, digits=None) for chip_s in (330, 22_849_200, 99.94 * 3600)] == [
        "5.5 chip-min",
        "6,347 chip-h",
        "99.9 chip-h",
    ]


def test_a_column_reads_in_the_unit_of_its_largest_figure():
    assert column_unit([30, None, 600]) == ("chip-min", 60.0)
    assert column_unit([]) == ("chip-s", 1.0)


def test_a_small_job_s_badput_and_demand_read_in_chip_minutes_and_seconds():
    # A job of 4 chips living 5 min: 600 chip-s of demand, 150 s idle (600 chip-s = 10.0 chip-min) and
    # 10 s queued (40 chip-s). In chip-hours to one decimal every figure read 0.0.
    connection = duckdb.connect()
    connection.execute("""create table badput_breakdown as select * from (values
        ('idle', 'demand', 600 / 3600, 0.5), ('queued', 'demand', 40 / 3600, 0.0333)) t(category, base, chip_hours, share)""")
    connection.execute(
        "create table goodput_by_segment as select 'team' as dimension, 'ml' as segment, 1 as jobs, "
        "1.0 as sg, 0.5 as rg, null as pg, null as mpg, 0.0 as pg_coverage, 1200.0 as lifetime_chip_s"
    )
    assert headline.badput_lines(connection) == [
        "  idle" + " " * 22 + "10.0 chip-min   50.0% of demand",
        "  queued" + " " * 22 + "40.0 chip-s    3.3% of demand",
    ]
    table = headline.segment_table(connection, "team")
    assert table[0].endswith("  chip-min") and table[1].endswith("      20.0")


def test_the_report_s_chip_hour_cells_read_in_the_unit_of_their_size():
    cell = _ENVIRONMENT.from_string('{% from "macros.html.j2" import cell %}{{ cell(row, "lost_chip_h", "chip_h") }}')
    assert cell.render(row={"lost_chip_h": 0.01}) == '<td data-v="0.01">36.0 chip-s</td>'
    assert cell.render(row={"lost_chip_h": 2.5}) == '<td data-v="2.5">2.5 chip-h</td>'
