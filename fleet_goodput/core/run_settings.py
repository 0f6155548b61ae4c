"""Event-time settings of the streaming pipeline, declared once.

Read from the `streaming:` section of a settings file (see configs/default.yaml
for the window length, which batch and streaming share):

    streaming:
      allowed_lateness_s: 3600   # how late an event may be and still change results
      watermark_lag_s: 300       # how far the watermark trails the latest event time seen
      max_silence_s: 21600       # how long a job with nothing new is waited for: a running one gets results
                                 # per window that long (streaming), an ended one its profiler sample (any run)
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

from fleet_goodput.core.config import SettingsFile, settings_file
from fleet_goodput.core.setting_types import ConfigError, SettingError, mapping, positive, text, whole

SOURCES = ("directory", "pubsub")


@dataclass(frozen=True)
class RunSettings:
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


# How each setting of the `streaming:` section is checked (fleet_goodput/core/setting_types.py).
_CHECKS = {
    "allowed_lateness_s": lambda value, where: whole(value, where, "seconds", 0),
    "watermark_lag_s": lambda value, where: whole(value, where, "seconds", 0),
    "max_silence_s": lambda value, where: whole(value, where, "seconds", 0),
    "retention_hours": lambda value, where: whole(value, where, "hours", 0),
    "poll_s": lambda value, where: positive(value, where, "seconds"),
    "source": lambda value, where: text(value, where, f"one of {', '.join(SOURCES)}"),
    "subscriptions": lambda value, where: {
        text(stream, where, "stream names"): text(name, f"{where}.{stream}", "a Pub/Sub subscription path")
        for stream, name in mapping(value, where, "a mapping of stream to subscription").items()},
}


def load_run_settings(path: str | Path | SettingsFile | None = None, base: RunSettings | None = None,
                         **overrides) -> RunSettings:
    """`base` (by default RunSettings()), with the `streaming:` keys of `path` (a settings file's
    path, or the file already read) and then `overrides` (those not None) replacing its."""
    raw = {f.name: getattr(base, f.name) for f in fields(RunSettings)} if base is not None else {}
    if path is not None:
        section = settings_file(path).raw.get("streaming") or {}
        if not isinstance(section, dict):
            raise ConfigError(f"`streaming:` in {path} must be a mapping")
        unknown = set(section) - set(_CHECKS)
        if unknown:
            raise ConfigError(f"unknown streaming setting(s) {', '.join(sorted(map(str, unknown)))}; "
                              f"known: {', '.join(sorted(_CHECKS))}")
        try:
            raw.update({key: _CHECKS[key](value, f"streaming.{key}") for key, value in section.items()})
        except SettingError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
    raw.update({key: value for key, value in overrides.items() if value is not None})
    return RunSettings(**raw)
