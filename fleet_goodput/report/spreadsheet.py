"""The report's CSV files, written so that a spreadsheet opening them shows every cell as text or a number.

OWASP "CSV Injection": a text cell that starts with = + - @, a tab or a
carriage return would be read as a formula, so it is written with a leading
single quote. Numbers are written as numbers. Kept apart from publish.py,
which imports Great Expectations to validate before it publishes.
"""

from __future__ import annotations

import csv
from pathlib import Path

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """A cell value a spreadsheet shows as text, never runs: text starting like a formula gets a leading quote."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        columns = list(rows[0]) if rows else []
        writer.writerow([spreadsheet_safe(c) for c in columns])
        writer.writerows([spreadsheet_safe(row[c]) for c in columns] for row in rows)
