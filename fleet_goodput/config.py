"""Pipeline settings: the bundled defaults overlaid with a user's YAML file.

The accelerator catalogue is part of the settings, so a test or a fleet with
its own parts passes one file and the whole pipeline sees the same catalogue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from fleet_goodput.configs import DEFAULT_CONFIG


class ConfigError(ValueError):
    """A settings file that cannot be used, with the reason."""


# Precisions a catalogue entry may give a peak for, and a profiler sample may
# name. A sample that names none ran in bf16 (MPG.md section 2).
PRECISIONS = ("bf16", "fp8", "fp4")
DEFAULT_PRECISION = "bf16"


@dataclass(frozen=True)
class Accelerator:
    key: str
    peak_flops: dict[str, float]  # precision -> peak dense FLOP/s per chip; always has bf16
    hbm_bytes_per_s: float
    vendor: str
    source: str
    url: str = ""

    @property
    def peak_bf16_flops(self) -> float:
        return self.peak_flops[DEFAULT_PRECISION]


@dataclass(frozen=True)
class SizeClass:
    name: str
    max_chips: int | None  # None: no upper bound


@dataclass(frozen=True)
class Settings:
    window_s: int
    accelerators: dict[str, Accelerator]
    size_classes: tuple[SizeClass, ...]

    def peak_flops(self, accelerator: str) -> float:
        return self.accelerators[accelerator].peak_bf16_flops


def _read_yaml(path) -> dict:
    try:
        # libyaml's safe loader where installed: the same documents, parsed several times faster.
        data = yaml.load(Path(str(path)).read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings, not {type(data).__name__}")
    return data


def _peaks(key: str, spec: dict, path) -> dict[str, float]:
    """{precision: peak} of one entry: `peak_flops: {bf16: …, fp8: …}`, or the
    older single `peak_bf16_flops`, which user catalogues may still use."""
    raw = spec["peak_flops"] if "peak_flops" in spec else {DEFAULT_PRECISION: spec["peak_bf16_flops"]}
    if not isinstance(raw, dict):
        raise ConfigError(f"accelerator {key!r} in {path}: peak_flops must map precisions to FLOP/s")
    unknown = set(raw) - set(PRECISIONS)
    if unknown:
        raise ConfigError(f"accelerator {key!r} in {path}: unknown precision(s) {', '.join(sorted(map(str, unknown)))}; "
                          f"known: {', '.join(PRECISIONS)}")
    if DEFAULT_PRECISION not in raw:
        raise ConfigError(f"accelerator {key!r} in {path}: peak_flops needs a {DEFAULT_PRECISION} peak")
    peaks = {precision: float(raw[precision]) for precision in PRECISIONS if precision in raw}
    for precision, peak in peaks.items():
        if not math.isfinite(peak) or peak <= 0:
            raise ConfigError(f"accelerator {key!r} in {path}: {precision} peak must be a positive finite number")
    return peaks


def load_catalogue(path) -> dict[str, Accelerator]:
    raw = _read_yaml(path)
    catalogue = {}
    for key, spec in raw.items():
        try:
            catalogue[key] = Accelerator(
                key=key,
                peak_flops=_peaks(key, spec, path),
                hbm_bytes_per_s=float(spec["hbm_bytes_per_s"]),
                vendor=str(spec.get("vendor", "")),
                source=str(spec["source"]),
                url=str(spec.get("url", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"accelerator {key!r} in {path}: needs peak_flops (or peak_bf16_flops), "
                              f"hbm_bytes_per_s and source ({exc})") from exc
    return catalogue


def peak_table(accelerators: dict[str, Accelerator]) -> dict[str, float]:
    """The peak lookup the pipeline carries: accelerator -> bf16 peak, and
    `accelerator/precision` -> that precision's peak (see `peak_of`).

    A flat dict of strings, so it pickles small and a test may pass
    {accelerator: peak} alone for bf16."""
    table = {key: accelerator.peak_bf16_flops for key, accelerator in accelerators.items()}
    table.update({f"{key}/{precision}": peak for key, accelerator in accelerators.items()
                  for precision, peak in accelerator.peak_flops.items()})
    return table


def peak_of(table: dict[str, float], accelerator: str, precision: str | None) -> float | None:
    """Peak FLOP/s per chip of `accelerator` in `precision` (bf16 when None);
    None when the catalogue gives no peak for that precision on that part."""
    if precision is None or precision == DEFAULT_PRECISION:
        return table[accelerator]
    return table.get(f"{accelerator}/{precision}")


def load_settings(path: str | Path | None = None, base: Settings | None = None) -> Settings:
    """`base` (by default the bundled defaults), with the keys of `path` (if given) replacing its.

    A store passes the settings it keeps as `base` (fleet_goodput/stored_settings.py),
    so a file that names only some keys changes only those."""
    if base is None:
        base = _overlay(_read_yaml(DEFAULT_CONFIG), Path(str(DEFAULT_CONFIG)).parent, None, DEFAULT_CONFIG)
    if path is None:
        return base
    return _overlay(_read_yaml(path), Path(path).parent, base, path)


def _overlay(raw: dict, folder: Path, base: Settings | None, path) -> Settings:
    """The settings `raw` names (a catalogue path relative to `folder`), the rest from `base`."""
    unknown = set(raw) - set(SETTING_KEYS) - _FOREIGN_KEYS
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(sorted(unknown))} in {path}; known: {', '.join(SETTING_KEYS)}")
    window_s = check_window_s(int(raw["window_s"])) if "window_s" in raw else base.window_s
    if "accelerators" in raw:
        catalogue_path = Path(raw["accelerators"])
        accelerators = load_catalogue(catalogue_path if catalogue_path.is_absolute() else folder / catalogue_path)
    else:
        accelerators = base.accelerators
    if "size_classes" in raw:
        size_classes = tuple(SizeClass(str(c["name"]), None if c.get("max_chips") is None else int(c["max_chips"]))
                             for c in raw["size_classes"])
    else:
        size_classes = base.size_classes
    return Settings(window_s=window_s, accelerators=accelerators, size_classes=size_classes)


def check_window_s(window_s: int) -> int:
    if window_s <= 0 or 86400 % window_s:
        raise ConfigError(f"window_s must divide a day evenly (got {window_s})")
    return window_s


# The pipeline settings a file may name; the defaults name them all.
SETTING_KEYS = ("window_s", "accelerators", "size_classes")
# Sections that other commands read from the same file (runner options, sources);
# the pipeline settings ignore them rather than reject them.
_FOREIGN_KEYS = {"runner", "beam", "dataflow", "streaming", "sources", "report"}


def beam_flags(path: str | Path | None) -> list[str]:
    """Pipeline options from the `beam:` section of a settings file, as flags.

    Command-line Beam flags come after these, so they override them.
    """
    if path is None:
        return []
    section = _read_yaml(path).get("beam") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"`beam:` in {path} must be a mapping of pipeline options")
    flags = []
    for name, value in section.items():
        if isinstance(value, bool):
            flags.append(f"--{name}" if value else f"--no_{name}")
        elif isinstance(value, list):
            flags.extend(f"--{name}={item}" for item in value)
        else:
            flags.append(f"--{name}={value}")
    return flags
