"""The keys events are grouped by: a job's id, or a capacity key for one cluster's accelerator.

A capacity key cannot be mistaken for a job id: it starts with U+001F (unit
separator), which an accepted job_id or cluster cannot hold (the decoders
reject control characters).
"""

from __future__ import annotations

_KEY_SEPARATOR = "\x1f"
CAPACITY_KEY_PREFIX = f"{_KEY_SEPARATOR}capacity{_KEY_SEPARATOR}"


def capacity_key(cluster: str, accelerator: str) -> str:
    return f"{CAPACITY_KEY_PREFIX}{cluster}{_KEY_SEPARATOR}{accelerator}"


def is_capacity_key(key: str) -> bool:
    return key.startswith(CAPACITY_KEY_PREFIX)


def parse_capacity_key(key: str) -> tuple[str, str]:
    cluster, accelerator = key[len(CAPACITY_KEY_PREFIX) :].split(_KEY_SEPARATOR, 1)
    return cluster, accelerator


# A source's statement of the period it observed of a cluster rides with the scheduler's kept times
# (fleet_goodput/core/asof.py) as two entries, (from, key) and (to, key), under keys no job or capacity
# key can be.
OBSERVED_FROM_PREFIX = f"{_KEY_SEPARATOR}observed-from{_KEY_SEPARATOR}"
OBSERVED_TO_PREFIX = f"{_KEY_SEPARATOR}observed-to{_KEY_SEPARATOR}"


def observed_keys(cluster: str) -> tuple[str, str]:
    """The keys of a cluster's observed period's start and end."""
    return f"{OBSERVED_FROM_PREFIX}{cluster}", f"{OBSERVED_TO_PREFIX}{cluster}"


def parse_observed_key(key: str) -> tuple[str, str] | None:
    """("from" or "to", cluster) of an observed period's key; None for any other key."""
    if key.startswith(OBSERVED_FROM_PREFIX):
        return "from", key[len(OBSERVED_FROM_PREFIX) :]
    if key.startswith(OBSERVED_TO_PREFIX):
        return "to", key[len(OBSERVED_TO_PREFIX) :]
    return None
