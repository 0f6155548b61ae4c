"""Log profiles: the patterns by which a training framework's stdout says what its runtime did.

The built-in profiles (Megatron-LM, NeMo) live in configs/log_profiles.yaml, whose
header documents each key; a user adds or replaces profiles with a YAML file of the
same shape (`mpg import logs --profiles FILE`). `load_profiles` checks every
profile (a key it does not know, a pattern that does not compile or lacks its named
group is a ProfileError naming the profile and the key), and `Profile.match` says
which kinds of line a log line is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from fleet_goodput.core.config import PRECISIONS, read_yaml
from fleet_goodput.core.setting_types import ConfigError

BUILT_IN = "log_profiles.yaml"
# Each kind of line a profile may recognise → the named groups its pattern must have
# (an iteration line's `ms` or `seconds` is checked on its own).
LINE_KINDS = {
    "start": (), "startup_seconds": ("seconds",), "iteration": ("step",),
    "save_start": ("step",), "save_ms": ("ms",), "save_end": ("step",), "save_durable": ("step",),
    "restore_start": ("step",), "restore_ms": ("ms",), "restore_end": ("step",), "end": (),
    "world_size": ("chips",), "accelerator": ("name",), "job": ("name",), "save_done": ("step",),
}
# Kinds that state a duration, in exactly one of these groups: `ms` or `seconds` (of one step, of the
# save), or for an iteration line `elapsed` (a progress bar's time since its epoch began).
TIMED_KINDS = {"iteration": ("ms", "seconds", "elapsed"), "save_done": ("ms", "seconds")}
SETTINGS = {"description", "timestamp", "time_format", "first_step", "precision"}


class ProfileError(ValueError):
    """A profile that cannot be used: says which profile, which key, and why."""


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern
    anchor: re.Pattern | None  # a line the anchor matches but the regex does not is malformed


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    timestamp: re.Pattern
    time_format: str
    first_step: int
    lines: dict[str, Pattern]
    precisions: tuple[tuple[str, re.Pattern], ...]  # in order of preference

    def precision_of(self, line: str) -> str | None:
        """The first precision (in the profile's order) whose pattern `line` matches."""
        return next((name for name, regex in self.precisions if regex.search(line)), None)

    def timestamp_text(self, line: str) -> str | None:
        found = self.timestamp.search(line)
        return found.group("time") if found else None

    def match(self, line: str) -> tuple[list[tuple[str, dict]], list[str]]:
        """([(kind, named groups)] of the kinds `line` is, [kinds whose anchor matches but
        whose pattern does not]) for one line without its line break."""
        matched, malformed = [], []
        for kind, pattern in self.lines.items():
            found = pattern.regex.search(line)
            if found:
                matched.append((kind, found.groupdict()))
            elif pattern.anchor is not None and pattern.anchor.search(line):
                malformed.append(kind)
        return matched, malformed


def _compile(profile: str, key: str, text, groups: tuple[str, ...]) -> re.Pattern:
    if not isinstance(text, str) or not text:
        raise ProfileError(f"profile {profile!r}: {key} must be a regular expression (a string)")
    try:
        regex = re.compile(text)
    except re.error as exc:
        raise ProfileError(f"profile {profile!r}: {key} is not a valid regular expression ({exc})") from exc
    missing = [group for group in groups if group not in regex.groupindex]
    if missing:
        raise ProfileError(f"profile {profile!r}: {key} needs the named group(s) "
                           + ", ".join(f"(?P<{group}>...)" for group in missing))
    return regex


def _line_pattern(profile: str, kind: str, value) -> Pattern:
    if isinstance(value, dict):
        unknown = set(value) - {"pattern", "anchor"}
        if unknown:
            raise ProfileError(f"profile {profile!r}: {kind} has unknown keys {sorted(unknown)} "
                               "(expected pattern and anchor)")
        regex = _compile(profile, f"{kind}.pattern", value.get("pattern"), LINE_KINDS[kind])
        anchor = _compile(profile, f"{kind}.anchor", value["anchor"], ()) if "anchor" in value else None
    else:
        regex, anchor = _compile(profile, kind, value, LINE_KINDS[kind]), None
    return Pattern(regex, anchor)


def _profile(name: str, body) -> Profile:
    if not isinstance(body, dict):
        raise ProfileError(f"profile {name!r} must be a mapping of keys to patterns")
    unknown = set(body) - SETTINGS - set(LINE_KINDS)
    if unknown:
        raise ProfileError(f"profile {name!r}: unknown keys {sorted(unknown)} "
                           f"(known: {', '.join(sorted(SETTINGS | set(LINE_KINDS)))})")
    for required in ("timestamp", "iteration"):
        if required not in body:
            raise ProfileError(f"profile {name!r} has no {required} pattern")
    lines = {kind: _line_pattern(name, kind, body[kind]) for kind in LINE_KINDS if kind in body}
    for kind, timings in TIMED_KINDS.items():
        groups = lines[kind].regex.groupindex if kind in lines else {"ms": 0}
        if sum(timing in groups for timing in timings) != 1:
            raise ProfileError(f"profile {name!r}: {kind} needs exactly one of the groups "
                               + ", ".join(f"(?P<{timing}>...)" for timing in timings)
                               + (", the time of one step or the progress bar's elapsed time" if kind == "iteration"
                                  else ", how long the save took"))
    precisions = body.get("precision", {})
    if not isinstance(precisions, dict):
        raise ProfileError(f"profile {name!r}: precision must map precisions ({', '.join(PRECISIONS)}) to patterns")
    unknown = set(precisions) - set(PRECISIONS)
    if unknown:
        raise ProfileError(f"profile {name!r}: precision names unknown precisions {sorted(map(str, unknown))} "
                           f"(known: {', '.join(PRECISIONS)})")
    first_step = body.get("first_step", 1)
    if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
        raise ProfileError(f"profile {name!r}: first_step must be a whole number, 0 or more")
    return Profile(name=name, description=str(body.get("description", "")),
                   timestamp=_compile(name, "timestamp", body["timestamp"], ("time",)),
                   time_format=str(body.get("time_format", "%Y-%m-%d %H:%M:%S")),
                   first_step=first_step, lines=lines,
                   precisions=tuple((str(precision), _compile(name, f"precision.{precision}", pattern, ()))
                                    for precision, pattern in precisions.items()))


def _read(text: str, where: str) -> dict:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{where}: not valid YAML ({exc})") from exc
    if not isinstance(document, dict):
        raise ProfileError(f"{where}: expected a mapping of profile names to profiles")
    return document


def load_profiles(user_file: Path | None = None) -> dict[str, Profile]:
    """The built-in profiles, with those of `user_file` added (a name already built in is replaced)."""
    documents = _read(resources.files("fleet_goodput.configs").joinpath(BUILT_IN).read_text(encoding="utf-8"),
                      BUILT_IN)
    if user_file is not None:
        try:
            documents.update(read_yaml(user_file))  # bounded in size, values and depth, as every settings file
        except ConfigError as exc:
            raise ProfileError(f"cannot use the profiles file: {exc}") from exc
    return {str(name): _profile(str(name), body) for name, body in documents.items()}
