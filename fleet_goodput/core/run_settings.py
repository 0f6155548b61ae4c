"""How runs go, batch and stream alike: event time, the store's retention, and where a stream reads.

The metric's own settings (window, catalogue, size classes) are `Settings`
(fleet_goodput/core/config.py); these are the `runs:` section of a settings file:

    runs:
      allowed_lateness_s: 3600   # how late an event may be and still change results (every run; the store keeps it)
      max_silence_s: 21600       # how long a job with nothing new is waited for: an ended one for its profiler
                                 # sample (every run; the store keeps it), a running one with results per window
                                 # (a stream)
      retention_hours: 168       # the store: runs older than this can no longer be read (vacuum; every run)
      poll_s: 1.0                # `mpg stream`: how often a watched folder is listed
      source: directory          # `mpg stream`: or pubsub (Dataflow)
      subscriptions:             # with source: pubsub, one per stream
        scheduler: projects/P/subscriptions/goodput-scheduler
        runtime: projects/P/subscriptions/goodput-runtime
        profiler: projects/P/subscriptions/goodput-profiler

The section was called `streaming:` while only streams were thought to use it;
a file may still call it that (not both). `watermark_lag_s`, which such a
section may name, has had no effect since the local stream commits a run per
batch of files, and Dataflow's watermark is Pub/Sub's: it is read and ignored
there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from fleet_goodput.core.config import SettingsFile, settings_file
from fleet_goodput.core.setting_types import ConfigError, SettingError, expected, mapping, positive, text, whole

SOURCES = ("directory", "pubsub")
SECTION = "runs"
# The section's name in files written before it was `runs:`: still read.
OLDER_SECTION = "streaming"
# Keys a `streaming:` section may name that no longer change anything: read and ignored there, so
# older files still work (a `runs:` section naming them is refused, as any unknown key).
IGNORED = ("watermark_lag_s",)
# How long a silent job is waited for (`runs.max_silence_s`), unless a settings file or the store says otherwise.
MAX_SILENCE_S = 6 * 3600


@dataclass(frozen=True)
class RunSettings:
    allowed_lateness_s: int = 3600
    max_silence_s: int = MAX_SILENCE_S
    retention_hours: int = 168
    poll_s: float = 1.0
    source: str = "directory"
    subscriptions: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ConfigError(f"{SECTION}.source must be one of {', '.join(SOURCES)} (got {self.source!r})")
        for name in ("allowed_lateness_s", "max_silence_s", "retention_hours"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{SECTION}.{name} must not be negative")
        if self.poll_s <= 0:
            raise ConfigError(f"{SECTION}.poll_s must be positive")

    @property
    def max_silence_us(self) -> int:
        """`max_silence_s` in the microseconds of event time: the one place it is converted."""
        return self.max_silence_s * 1_000_000


def _source(value, where: str) -> str:
    if text(value, where, f"one of {', '.join(SOURCES)}") not in SOURCES:
        raise expected(where, f"one of {', '.join(SOURCES)}", value)
    return value


# How each setting of the section is checked (fleet_goodput/core/setting_types.py).
_CHECKS = {
    "allowed_lateness_s": lambda value, where: whole(value, where, "seconds", 0),
    "max_silence_s": lambda value, where: whole(value, where, "seconds", 0),
    "retention_hours": lambda value, where: whole(value, where, "hours", 0),
    "poll_s": lambda value, where: positive(value, where, "seconds"),
    "source": _source,
    "subscriptions": lambda value, where: {
        text(stream, where, "stream names"): text(name, f"{where}.{stream}", "a Pub/Sub subscription path")
        for stream, name in mapping(value, where, "a mapping of stream to subscription").items()
    },
}


def load_run_settings(
    path: str | Path | SettingsFile | None = None, base: RunSettings | None = None, **overrides
) -> RunSettings:
    """`base` (by default RunSettings()), with the `runs:` keys of `path` (a settings file's path, or the
    file already read) and then `overrides` (those not None) replacing its."""
    raw = {f.name: getattr(base, f.name) for f in fields(RunSettings)} if base is not None else {}
    if path is not None:
        config = settings_file(path)
        name, section = _section(config)
        ignored = IGNORED if name == OLDER_SECTION else ()
        unknown = set(section) - set(_CHECKS) - set(ignored)
        if unknown:
            raise ConfigError(
                f"unknown {name} setting(s) {', '.join(sorted(map(str, unknown)))}; known: {', '.join(sorted(_CHECKS))}"
            )
        try:
            raw.update(
                {key: _CHECKS[key](value, f"{name}.{key}") for key, value in section.items() if key not in ignored}
            )
        except SettingError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
    raw.update({key: value for key, value in overrides.items() if value is not None})
    return RunSettings(**raw)


def _section(config: SettingsFile) -> tuple[str, dict]:
    """The name the file gives the section (`runs`, or the older `streaming`) and what it holds."""
    named = [name for name in (SECTION, OLDER_SECTION) if name in config.raw]
    if len(named) > 1:
        raise ConfigError(
            f"config file {config}: `{OLDER_SECTION}:` is the older name of `{SECTION}:`; keep one of them"
        )
    name = named[0] if named else SECTION
    section = config.raw.get(name) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"`{name}:` in {config} must be a mapping")
    return name, section
