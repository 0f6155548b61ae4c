"""Event-time settings of the streaming pipeline, declared once.

Read from the `streaming:` section of a settings file (see configs/default.yaml
for the window length, which batch and streaming share):

    streaming:
      allowed_lateness_s: 3600   # how late an event may be and still change results
      watermark_lag_s: 300       # how far the watermark trails the latest event time seen
      max_silence_s: 21600       # how long a job with no new events keeps getting hourly results
      poll_s: 1.0                # how often a watched folder is listed
      retention_hours: 168       # output store: runs older than this can no longer be read (vacuum)
      source: directory          # or pubsub (Dataflow)
      subscriptions:             # with source: pubsub, one per stream
        scheduler: projects/P/subscriptions/goodput-scheduler
        runtime: projects/P/subscriptions/goodput-runtime
        profiler: projects/P/subscriptions/goodput-profiler
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from fleet_goodput.config import ConfigError

SOURCES = ("directory", "pubsub")


@dataclass(frozen=True)
class StreamSettings:
    allowed_lateness_s: int = 3600
    watermark_lag_s: int = 300
    max_silence_s: int = 6 * 3600
    poll_s: float = 1.0
    retention_hours: int = 168
    source: str = "directory"
    subscriptions: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ConfigError(f"streaming.source must be one of {', '.join(SOURCES)} (got {self.source!r})")
        for name in ("allowed_lateness_s", "watermark_lag_s", "max_silence_s", "retention_hours"):
            if getattr(self, name) < 0:
                raise ConfigError(f"streaming.{name} must not be negative")
        if self.poll_s <= 0:
            raise ConfigError("streaming.poll_s must be positive")


def load_stream_settings(path: str | Path | None = None, base: StreamSettings | None = None,
                         **overrides) -> StreamSettings:
    """`base` (by default StreamSettings()), with the `streaming:` keys of `path` and then
    `overrides` (those not None) replacing its."""
    raw = {f.name: getattr(base, f.name) for f in fields(StreamSettings)} if base is not None else {}
    if path is not None:
        section = (yaml.safe_load(Path(path).read_text()) or {}).get("streaming") or {}
        if not isinstance(section, dict):
            raise ConfigError(f"`streaming:` in {path} must be a mapping")
        known = {f.name for f in fields(StreamSettings)}
        unknown = set(section) - known
        if unknown:
            raise ConfigError(f"unknown streaming setting(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
        raw.update(section)
    raw.update({key: value for key, value in overrides.items() if value is not None})
    return StreamSettings(**raw)
