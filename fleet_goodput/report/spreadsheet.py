"""The report's CSV files, written so that a spreadsheet opening them shows every cell as text or a number.

Each cell goes through `safe_text.csv_cell` (the same as `mpg sql --format
csv`): control characters shown as `\\xNN`, and a text cell that starts like
a formula (= + - @) written with a leading single quote. Numbers are written
as numbers. Kept apart from publish.py, which imports Great Expectations to
validate before it publishes.
"""

from __future__ import annotations

import csv
from pathlib import Path

from fleet_goodput.safe_text import csv_cell


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        columns = list(rows[0]) if rows else []
        writer.writerow([csv_cell(c) for c in columns])
        writer.writerows([csv_cell(row[c]) for c in columns] for row in rows)
