"""Log profiles: the patterns by which a training framework's stdout says what its runtime did.

The built-in profiles (Megatron-LM, NeMo) live in configs/log_profiles.yaml, whose
header documents each key; a user adds or replaces profiles with a YAML file of the
same shape (`mpg import logs --profiles FILE`). `load_profiles` checks every
profile (a key it does not know, a pattern that does not compile or lacks its named
group is a ProfileError naming the profile and the key), and `Profile.read` says
what a log line is (its kinds, timestamp and precision).

Patterns are RE2's (google-re2): matching takes time linear in the line, whatever
the pattern and the line, where Python's `re` backtracks. A user's `(a+)+$`, or a
1 MB line of repeated ` iteration 1/ 10 |` under the built-in Megatron pattern
(quadratic in `re`: 0.9 s at 50 KB), cannot stall an import. RE2's syntax is
Python's without lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`) and backreferences
(`\1`, `(?P=name)`); a profile using them is refused, naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import re2

from fleet_goodput.core.config import PRECISIONS, read_yaml
from fleet_goodput.core.setting_types import ConfigError

BUILT_IN = "log_profiles.yaml"
# Each kind of line a profile may recognise → the named groups its pattern must have
# (an iteration line's `ms` or `seconds` is checked on its own).
LINE_KINDS = {
    "start": (),
    "startup_seconds": ("seconds",),
    "iteration": ("step",),
    "save_start": ("step",),
    "save_ms": ("ms",),
    "save_end": ("step",),
    "save_durable": ("step",),
    "restore_start": ("step",),
    "restore_ms": ("ms",),
    "restore_end": ("step",),
    "end": (),
    "world_size": ("chips",),
    "accelerator": ("name",),
    "job": ("name",),
    "save_done": ("step",),
}
# Kinds that state a duration, in exactly one of these groups: `ms` or `seconds` (of one step, of the
# save), or for an iteration line `elapsed` (a progress bar's time since its epoch began).
TIMED_KINDS = {"iteration": ("ms", "seconds", "elapsed"), "save_done": ("ms", "seconds")}
SETTINGS = {"description", "timestamp", "time_format", "first_step", "precision"}


class ProfileError(ValueError):
    """A profile that cannot be used: says which profile, which key, and why."""


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error comes back as the exception; RE2 would print it as well


@dataclass(frozen=True)
class Pattern:
    regex: re2._Regexp
    anchor: re2._Regexp | None  # a line the anchor matches but the regex does not is malformed


@dataclass(frozen=True)
class LineRead:
    """What a profile reads in one line."""

    kinds: list[tuple[str, dict]]  # (kind, named groups) of each kind the line is
    malformed: list[str]  # kinds whose anchor matches but whose pattern does not
    time_text: str | None  # the timestamp's text
    precision: str | None  # the first precision (in the profile's order) the line names


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    timestamp: re2._Regexp
    time_format: str
    first_step: int
    lines: dict[str, Pattern]
    precisions: tuple[tuple[str, re2._Regexp], ...]  # in order of preference
    # Every pattern above in one RE2 set, screened once per line: most lines match none, and a call
    # into RE2 costs more than Python's `re` (the line is encoded each time), so one call finds which
    # patterns to run for their groups: 14 µs a line against 29 pattern by pattern, and Python's `re`'s 4
    # (benchmarks/bench_log_lines.py), the price of never backtracking.
    screen: re2.Set = field(init=False, repr=False, compare=False)
    screened: tuple[re2._Regexp, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        screened = (
            self.timestamp,
            *(regex for _, regex in self.precisions),
            *(regex for pattern in self.lines.values() for regex in (pattern.regex, pattern.anchor) if regex),
        )
        screen = re2.Set.SearchSet(_RE2_OPTIONS)
        for regex in screened:
            screen.Add(regex.pattern)
        screen.Compile()
        object.__setattr__(self, "screen", screen)
        object.__setattr__(self, "screened", screened)

    def read(self, line: str) -> LineRead:
        """What `line` (without its line break) says: its kinds, malformed kinds, timestamp and precision."""
        hits = {self.screened[index] for index in self.screen.Match(line) or ()}  # None: no pattern matches
        kinds, malformed = [], []
        for kind, pattern in self.lines.items():
            found = pattern.regex.search(line) if pattern.regex in hits else None
            if found:
                kinds.append((kind, found.groupdict()))
            elif pattern.anchor is not None and pattern.anchor in hits:
                malformed.append(kind)
        stamp = self.timestamp.search(line) if self.timestamp in hits else None
        precision = next((name for name, regex in self.precisions if regex in hits), None)
        return LineRead(kinds, malformed, stamp.group("time") if stamp else None, precision)


def _compile(profile: str, key: str, text, groups: tuple[str, ...]) -> re2._Regexp:
    if not isinstance(text, str) or not text:
        raise ProfileError(f"profile {profile!r}: {key} must be a regular expression (a string)")
    try:
        regex = re2.compile(text, _RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ProfileError(
            f"profile {profile!r}: {key} is not a valid regular expression ({why}; RE2 syntax: "
            "no lookaround or backreferences)"
        ) from exc
    missing = [group for group in groups if group not in regex.groupindex]
    if missing:
        raise ProfileError(
            f"profile {profile!r}: {key} needs the named group(s) "
            + ", ".join(f"(?P<{group}>...)" for group in missing)
        )
    return regex


def _line_pattern(profile: str, kind: str, value) -> Pattern:
    if isinstance(value, dict):
        unknown = set(value) - {"pattern", "anchor"}
        if unknown:
            raise ProfileError(
                f"profile {profile!r}: {kind} has unknown keys {sorted(unknown)} (expected pattern and anchor)"
            )
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
        raise ProfileError(
            f"profile {name!r}: unknown keys {sorted(unknown)} (known: {', '.join(sorted(SETTINGS | set(LINE_KINDS)))})"
        )
    for required in ("timestamp", "iteration"):
        if required not in body:
            raise ProfileError(f"profile {name!r} has no {required} pattern")
    lines = {kind: _line_pattern(name, kind, body[kind]) for kind in LINE_KINDS if kind in body}
    for kind, timings in TIMED_KINDS.items():
        groups = lines[kind].regex.groupindex if kind in lines else {"ms": 0}
        if sum(timing in groups for timing in timings) != 1:
            raise ProfileError(
                f"profile {name!r}: {kind} needs exactly one of the groups "
                + ", ".join(f"(?P<{timing}>...)" for timing in timings)
                + (
                    ", the time of one step or the progress bar's elapsed time"
                    if kind == "iteration"
                    else ", how long the save took"
                )
            )
    precisions = body.get("precision", {})
    if not isinstance(precisions, dict):
        raise ProfileError(f"profile {name!r}: precision must map precisions ({', '.join(PRECISIONS)}) to patterns")
    unknown = set(precisions) - set(PRECISIONS)
    if unknown:
        raise ProfileError(
            f"profile {name!r}: precision names unknown precisions {sorted(map(str, unknown))} "
            f"(known: {', '.join(PRECISIONS)})"
        )
    first_step = body.get("first_step", 1)
    if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
        raise ProfileError(f"profile {name!r}: first_step must be a whole number, 0 or more")
    return Profile(
        name=name,
        description=str(body.get("description", "")),
        timestamp=_compile(name, "timestamp", body["timestamp"], ("time",)),
        time_format=str(body.get("time_format", "%Y-%m-%d %H:%M:%S")),
        first_step=first_step,
        lines=lines,
        precisions=tuple(
            (str(precision), _compile(name, f"precision.{precision}", pattern, ()))
            for precision, pattern in precisions.items()
        ),
    )


def _read(text: str, where: str) -> dict:
    import yaml  # here, as core/config.py does: `mpg --help` lists `mpg import` without it

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{where}: not valid YAML ({exc})") from exc
    if not isinstance(document, dict):
        raise ProfileError(f"{where}: expected a mapping of profile names to profiles")
    return document


def load_profiles(user_file: Path | None = None) -> dict[str, Profile]:
    """The built-in profiles, with those of `user_file` added (a name already built in is replaced)."""
    documents = _read(resources.files("fleet_goodput.configs").joinpath(BUILT_IN).read_text(encoding="utf-8"), BUILT_IN)
    if user_file is not None:
        try:
            documents.update(read_yaml(user_file))  # bounded in size, values and depth, as every settings file
        except ConfigError as exc:
            raise ProfileError(f"cannot use the profiles file: {exc}") from exc
    return {str(name): _profile(str(name), body) for name, body in documents.items()}
