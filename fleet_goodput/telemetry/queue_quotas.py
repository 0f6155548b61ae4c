"""What a scheduler file says of its queues' quotas: Kueue's ClusterQueues and Cohorts, level by level.

A quota is configuration, not an event of a job: the scheduler stream of the
contract has no record for it, and its schemas evolve only by adding fields.
So a source that knows quotas (`mpg import kubernetes`, reading ClusterQueue,
Cohort and ResourceFlavor objects) states them, as it states what it observed
(fleet_goodput/telemetry/observed.py), in the Avro file's metadata: the entry
`fleet_goodput.queue_quotas`, a JSON list of levels, each

    [cluster, kind, name, cohort, flavor, accelerator, start_us,
     nominal, borrowing_limit, lending_limit, usage, borrowed]

in chips and microseconds since the Unix epoch: from `start_us` on, the
ClusterQueue (kind `ClusterQueue`; `cohort` its cohort) or Cohort (kind
`Cohort`; `cohort` its parent) `name` holds `nominal` chips of `flavor` (a
ResourceFlavor; `accelerator` its catalogue key), may borrow up to
`borrowing_limit` and lend up to `lending_limit` (null: no limit), and, for a
ClusterQueue as its status said then, uses `usage` chips of which `borrowed`
are over its nominal quota (null where the status did not say).

A run keeps every level of the files it applies (`queue_quota`, the same
level stated twice is one), so the levels do not depend on how the files were
cut; a file without the entry states nothing.
"""

from __future__ import annotations

import json
from typing import BinaryIO

from fleet_goodput.telemetry.observed import header_meta
from fleet_goodput.telemetry.plausible import EARLIEST_PLAUSIBLE_US, LATEST_PLAUSIBLE_US, Invalid, check_identifier

META_KEY = "fleet_goodput.queue_quotas"
FIELDS = (
    "cluster",
    "kind",
    "name",
    "cohort",
    "flavor",
    "accelerator",
    "start_us",
    "nominal",
    "borrowing_limit",
    "lending_limit",
    "usage",
    "borrowed",
)
KINDS = ("ClusterQueue", "Cohort")
# A header is read whole: no cluster has more queue levels than this in one file.
MAX_LEVELS = 100_000
MAX_CHIPS = 2**31 - 1  # a chip count is an Avro int elsewhere in the contract


class BadQuotas(ValueError):
    """A file's `fleet_goodput.queue_quotas` entry that is not a valid statement; the message says why."""


def metadata(levels: list[dict] | None) -> dict[str, str]:
    """The Avro metadata entry stating `levels` (dicts of FIELDS), checked; none for no levels."""
    if not levels:
        return {}
    rows = [[level[name] for name in FIELDS] for level in levels]
    check_levels(rows)
    return {META_KEY: json.dumps(sorted(rows, key=_order), separators=(",", ":"))}


def levels_of(source: bytes | BinaryIO) -> list[dict]:
    """The levels an Avro file's header states ([]: none), from its bytes or an open file (only the header
    is read). Raises BadQuotas for a malformed entry."""
    return levels_in(header_meta(source))


def levels_in(meta: dict[str, bytes]) -> list[dict]:
    """The levels a header's metadata (observed.header_meta) states ([]: none); BadQuotas if malformed."""
    raw = meta.get(META_KEY)
    if raw is None:
        return []
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadQuotas(f"its {META_KEY} metadata is not JSON ({exc})") from None
    return [dict(zip(FIELDS, row)) for row in check_levels(value)]


def check_levels(value) -> list[list]:
    """The statement's rows, checked: names as the contract's identifiers, a kind, plausible times, whole
    chips from 0 (null where the source did not say)."""
    if not isinstance(value, list) or len(value) > MAX_LEVELS:
        raise BadQuotas(f"its {META_KEY} metadata is not a list of at most {MAX_LEVELS:,} levels")
    for row in value:
        if not isinstance(row, list) or len(row) != len(FIELDS):
            raise BadQuotas(f"its {META_KEY} metadata holds {str(row)[:80]!r}, not a level of {len(FIELDS)} fields")
        level = dict(zip(FIELDS, row))
        try:
            for name in ("cluster", "name", "flavor", "accelerator"):
                if not isinstance(level[name], str) or not level[name]:
                    raise Invalid(f"{name} is not a name")
                check_identifier(name, level[name])
            if level["cohort"] is not None:
                check_identifier("cohort", level["cohort"])
        except Invalid as exc:
            raise BadQuotas(f"its {META_KEY} metadata names a bad queue: {exc}") from None
        if level["kind"] not in KINDS:
            raise BadQuotas(
                f"its {META_KEY} metadata gives a kind {str(level['kind'])[:40]!r}, not one of {', '.join(KINDS)}"
            )
        start = level["start_us"]
        if (
            not isinstance(start, int)
            or isinstance(start, bool)
            or not EARLIEST_PLAUSIBLE_US <= start < LATEST_PLAUSIBLE_US
        ):
            raise BadQuotas(f"its {META_KEY} metadata gives {level['name']!r} an impossible start {str(start)[:40]}")
        for name in ("nominal", "borrowing_limit", "lending_limit", "usage", "borrowed"):
            chips = level[name]
            if chips is None and name != "nominal":
                continue
            if not isinstance(chips, int) or isinstance(chips, bool) or not 0 <= chips <= MAX_CHIPS:
                raise BadQuotas(
                    f"its {META_KEY} metadata gives {level['name']!r} {name} {str(chips)[:40]}, "
                    f"not a whole number of chips from 0 to {MAX_CHIPS:,}"
                )
    return value


def _order(row: list) -> tuple:
    return tuple("" if value is None else str(value) if isinstance(value, str) else f"{value:020d}" for value in row)
