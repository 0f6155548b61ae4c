"""The typed schema of a settings file: each value checked for exactly the type it must have.

YAML gives Python values, and Python is lenient where settings must not be:
`True` is an int (so `window_s: true` would be one-second windows), and
`int('3600')` or `float('1e15')` would quietly accept strings. These checks
take no conversions: a whole number is an int that is not a bool, a number is
an int or float that is finite, a string is a str. Each failure names the key
path (`size_classes[2].max_chips`), what it expects and what it got.
"""

from __future__ import annotations

import math


class ConfigError(ValueError):
    """A settings file that cannot be used, with the reason."""


class SettingError(ConfigError):
    """A value of a settings file that does not fit the schema; the loader adds the file's name."""


def expected(where: str, what: str, value) -> SettingError:
    return SettingError(f"{where}: expected {what}, got {shown(value)}")


def shown(value) -> str:
    """A value as a message shows it: containers by kind, a quoted number with the fix."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return repr(value)
        return f"the string {value!r} (quoted, so it is text: write the number without quotes)"
    return repr(value)


def whole(value, where: str, unit: str, minimum: int) -> int:
    """An int (not a bool, not a string or float) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise expected(where, f"a whole number of {unit} ≥ {minimum}", value)
    return value


def positive(value, where: str, unit: str) -> float:
    """A finite number (int or float, not a bool or string) above zero."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise expected(where, f"a positive number of {unit}", value)
    return float(value)


def text(value, where: str, what: str = "a non-empty string") -> str:
    if not isinstance(value, str) or not value:
        raise expected(where, what, value)
    return value


def mapping(value, where: str, what: str) -> dict:
    if not isinstance(value, dict):
        raise expected(where, what, value)
    return value


def listing(value, where: str, what: str) -> list:
    if not isinstance(value, list):
        raise expected(where, what, value)
    return value


def known_keys(section: dict, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """`section` names every `required` key and nothing outside `required` and `optional`."""
    missing = [key for key in required if key not in section]
    unknown = sorted(str(key) for key in section if key not in required + optional)
    if missing or unknown:
        problems = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"has unknown key(s) {', '.join(unknown)}"] if unknown else []
        )
        raise SettingError(
            f"{where}: {' and '.join(problems)}; expected {', '.join(required)}"
            + (f" (and optionally {', '.join(optional)})" if optional else "")
        )
