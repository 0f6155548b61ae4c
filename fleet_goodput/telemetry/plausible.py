"""What the contract takes as plausible: times from 2000 up to 2100, identifiers short and free of control
characters. Shared by decoding (fleet_goodput/telemetry/decode.py) and the statements a file's header makes
(observed.py, queue_quotas.py), which check the same things without depending on each other."""

from __future__ import annotations

import re

# Telemetry from before this (2000-01-01) is a unit or clock error, not history.
EARLIEST_PLAUSIBLE_US = 946_684_800_000_000
# Telemetry from 2100 on is a unit error (nanoseconds as microseconds, say), not the future.
LATEST_PLAUSIBLE_US = 4_102_444_800_000_000
# Identifiers longer than this are not identifiers (and would bloat every key and row).
MAX_IDENTIFIER_LENGTH = 256
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class Invalid(ValueError):
    """A record that breaks the contract; the message is its rejection reason."""


def check_identifier(name: str, value: str) -> None:
    if len(value) > MAX_IDENTIFIER_LENGTH:
        raise Invalid(f"{name} of {len(value)} characters: longer than {MAX_IDENTIFIER_LENGTH} is not an identifier")
    if _CONTROL_CHARACTER.search(value):
        raise Invalid(f"{name} {value[:40]!r} holds control characters: not an identifier")
