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
    cluster, accelerator = key[len(CAPACITY_KEY_PREFIX):].split(_KEY_SEPARATOR, 1)
    return cluster, accelerator
