"""The period a validation or report covers, and the lock that serialises runs of one period.

A period is a closed range of UTC days. Its name (`2026-01-01`, or
`2026-01-01_2026-01-07` for a range) names the folders it writes
(OUTPUT/quality/<name>/, OUTPUT/reports/<name>/) and its lock file
(OUTPUT/locks/<name>.lock), so two runs of the same period cannot interleave
while runs of different periods proceed side by side.
"""

from __future__ import annotations

import fcntl
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command line registers its period flags without the store's libraries
    from fleet_goodput.quality.checked_run import CheckedRun


class PeriodError(ValueError):
    """A period that cannot be used (bad dates, or no output to infer it from)."""


class PeriodBusy(RuntimeError):
    """Another run holds the period's lock."""


@dataclass(frozen=True)
class Period:
    first: date
    last: date

    def __post_init__(self) -> None:
        if self.last < self.first:
            raise PeriodError(f"period ends ({self.last}) before it starts ({self.first})")

    @property
    def name(self) -> str:
        return (
            self.first.isoformat() if self.first == self.last else f"{self.first.isoformat()}_{self.last.isoformat()}"
        )

    @property
    def days(self) -> list[str]:
        return [(self.first + timedelta(days=n)).isoformat() for n in range((self.last - self.first).days + 1)]

    @property
    def start_s(self) -> int:
        return _epoch_s(self.first)

    @property
    def end_s(self) -> int:
        """The first second after the period (the next day's midnight, UTC)."""
        return _epoch_s(self.last + timedelta(days=1))


def _epoch_s(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp())


def _parse_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise PeriodError(f"not a date: {text!r} (expected YYYY-MM-DD)") from exc


def add_period_arguments(parser) -> None:
    parser.add_argument("--date", metavar="D", help="one UTC day, YYYY-MM-DD")
    parser.add_argument("--from", dest="from_date", metavar="D", help="first UTC day of a range (with --to)")
    parser.add_argument("--to", dest="to_date", metavar="D", help="last UTC day of a range, inclusive (with --from)")


def period_from_args(args, run: CheckedRun) -> Period:
    """--date D, or --from D --to D; with neither, every day from the first partition to the as-of day."""
    if args.date and (args.from_date or args.to_date):
        raise PeriodError("give either --date or --from/--to, not both")
    if args.date:
        day = _parse_day(args.date)
        return Period(day, day)
    if args.from_date or args.to_date:
        if not (args.from_date and args.to_date):
            raise PeriodError("--from and --to go together")
        return Period(_parse_day(args.from_date), _parse_day(args.to_date))
    return whole_output_period(run)


def whole_output_period(run: CheckedRun) -> Period:
    """The days the checked run's job_window covers, up to its as-of time, and from the first day any
    source states it observed on (days before it hold no observed capacity, only jobs' early history)."""
    latest = run.record
    if latest is None:
        raise PeriodError(
            f"no committed run in {run.output}: run `mpg run --output {shlex.quote(str(run.output))}` first"
        )
    days = sorted(
        {
            part.removeprefix("date=")
            for name in run.store.files("job_window", latest)
            for part in name.split("/")
            if part.startswith("date=")
        }
    )
    if not days:
        raise PeriodError(f"no job_window rows in {run.output}: nothing to validate")
    as_of_us = latest.as_of_us
    # An as-of time at midnight ends the day before it: the new day has no data yet.
    last = datetime.fromtimestamp((as_of_us - 1) / 1e6, tz=timezone.utc).date() if as_of_us else _parse_day(days[-1])
    first = _parse_day(days[0])
    observed = ((latest.manifest or {}).get("clock") or {}).get("observed")
    if observed:
        first = max(
            first, datetime.fromtimestamp(min(p["from_us"] for p in observed.values()) / 1e6, tz=timezone.utc).date()
        )
    first = min(first, last) if as_of_us else first
    return Period(first, max(last, first))


@contextmanager
def period_lock(output_dir: str | Path, period: Period) -> Iterator[Path]:
    """Hold OUTPUT/locks/<period>.lock (an fcntl lock: released by the kernel if the process dies)."""
    path = Path(output_dir) / "locks" / f"{period.name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise PeriodBusy(f"period {period.name} is being validated or reported by {holder} (lock {path})") from exc
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        try:
            yield path
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
