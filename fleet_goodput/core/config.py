"""Pipeline settings: the bundled defaults overlaid with a user's YAML file.

The accelerator catalogue is part of the settings, so a test or a fleet with
its own parts passes one file and the whole pipeline sees the same catalogue.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from fleet_goodput.configs import DEFAULT_CONFIG
from fleet_goodput.core.setting_types import (
    ConfigError,
    SettingError,
    expected,
    known_keys,
    listing,
    mapping,
    positive,
    text,
    whole,
)

if TYPE_CHECKING:
    import yaml


# Precisions a catalogue entry may give a peak for, and a profiler sample may
# name. A sample that names none ran in bf16 (docs/metric.md section 2).
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
    # Patterns (regular expressions, case-insensitive) of the vendor's part names that mean
    # this part, as result logs and traces write them ("NVIDIA H200 NVL 141GB"); see part_key.
    names: tuple[str, ...] = ()

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


@cache
def _loader() -> type:
    """libyaml's safe loader where installed (the same documents, parsed several times faster),
    reading `275.0e12` and `1e15` as numbers, as YAML 1.2 does: PyYAML's YAML 1.1 rules want a
    sign in the exponent (`275.0e+12`) and would leave them text, which settings refuse.

    Made at the first settings file read, not at import: every command imports this module (its
    options name a settings file), and most read none (`mpg sql` on a store that keeps its settings)."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return Loader


# Values a settings file may hold once its aliases are expanded: the bundled catalogue holds
# about 500; nested aliases ("billion laughs") reach billions in a few lines.
MAX_VALUES = 100_000
# Levels a settings file may nest: the bundled catalogue nests 4. Refused here rather than left to
# the YAML library: libyaml builds stop at 1,000 levels or not at all, and the Python parser recurses.
MAX_DEPTH = 100
# Bytes a settings file may hold: the bundled catalogue is 25 kB, and a device or a
# mistaken path (a data file) is not read to its end.
MAX_BYTES = 4 << 20


def read_yaml(path) -> dict:
    """The mapping a settings file holds, parsed safely: at most MAX_BYTES are read, and its
    values are counted, aliases expanded, before anything is built (at most MAX_VALUES, nested
    at most MAX_DEPTH levels)."""
    import yaml

    try:
        with open(str(path), "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ConfigError(f"config file {path} is larger than {MAX_BYTES >> 20} MiB: is it a settings file?")
        text = data.decode("utf-8")
        _count_values(text, path)
        data = yaml.load(text, Loader=_loader())
    except FileNotFoundError as exc:
        raise ConfigError(f"config file not found: {path}") from exc
    except OSError as exc:  # a folder, no permission
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {_one_line(exc)}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of settings, not {type(data).__name__}")
    return data


def _count_values(text: str, path) -> None:
    """Count the values of `text` as loading would build them, an alias counting as all it
    stands for, from the parser's events: nothing is built, so a bomb costs nothing to find."""
    import yaml

    sizes: dict[str, int] = {}  # anchor -> values it stands for
    open_collections: list[list] = [[None, 0]]  # [anchor, values so far]; the first holds the documents
    for event in yaml.parse(text, Loader=_loader()):
        if isinstance(event, yaml.CollectionStartEvent):
            open_collections.append([event.anchor, 1])
            if len(open_collections) - 1 > MAX_DEPTH:
                raise ConfigError(
                    f"config file {path}, line {event.start_mark.line + 1}: nested more than "
                    f"{MAX_DEPTH} levels deep; settings need far fewer"
                )
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = open_collections.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            anchor, size = None, sizes.get(event.anchor, 1)  # an undefined one: the loader says so
        else:
            continue
        if anchor is not None:
            sizes[anchor] = size
        open_collections[-1][1] += size
        if open_collections[-1][1] > MAX_VALUES:
            raise ConfigError(
                f"config file {path}, line {event.start_mark.line + 1}: more than {MAX_VALUES:,} "
                "values once its aliases (*name) are expanded; settings need far fewer"
            )


def _peaks(key: str, spec: dict) -> dict[str, float]:
    """{precision: peak} of one entry: `peak_flops: {bf16: …, fp8: …}`, or the
    older single `peak_bf16_flops`, which user catalogues may still use."""
    if "peak_flops" in spec:
        raw = mapping(spec["peak_flops"], f"{key}.peak_flops", "a mapping of precisions to FLOP/s")
    else:
        raw = {DEFAULT_PRECISION: spec["peak_bf16_flops"]}
    unknown = set(raw) - set(PRECISIONS)
    if unknown:
        raise SettingError(
            f"{key}.peak_flops: unknown precision(s) {', '.join(sorted(map(str, unknown)))}; "
            f"known: {', '.join(PRECISIONS)}"
        )
    if DEFAULT_PRECISION not in raw:
        raise SettingError(f"{key}.peak_flops: needs a {DEFAULT_PRECISION} peak")
    return {
        precision: positive(raw[precision], f"{key}.peak_flops.{precision}", "FLOP/s per chip")
        for precision in PRECISIONS
        if precision in raw
    }


CATALOGUE_FIELDS = ("hbm_bytes_per_s", "source")
CATALOGUE_OPTIONAL = ("peak_flops", "peak_bf16_flops", "vendor", "url", "names")


def _accelerator(key, spec) -> Accelerator:
    key = text(key, f"{key!r}", "an accelerator key that is a non-empty string")
    spec = mapping(spec, key, "a mapping with peak_flops, hbm_bytes_per_s and source")
    known_keys(spec, key, CATALOGUE_FIELDS, CATALOGUE_OPTIONAL)
    if "peak_flops" not in spec and "peak_bf16_flops" not in spec:
        raise SettingError(f"{key}: lacks peak_flops (or the older peak_bf16_flops)")
    return Accelerator(
        key=key,
        peak_flops=_peaks(key, spec),
        hbm_bytes_per_s=positive(spec["hbm_bytes_per_s"], f"{key}.hbm_bytes_per_s", "bytes/s"),
        vendor=text(spec.get("vendor", ""), f"{key}.vendor", "a string") if "vendor" in spec else "",
        source=text(spec["source"], f"{key}.source"),
        url=text(spec.get("url", ""), f"{key}.url", "a string") if "url" in spec else "",
        names=_names(key, spec.get("names", [])),
    )


def _names(key: str, raw) -> tuple[str, ...]:
    """An entry's part-name patterns, each a valid regular expression."""
    patterns = tuple(
        text(pattern, f"{key}.names[{index}]", "a regular expression")
        for index, pattern in enumerate(listing(raw, f"{key}.names", "a list of regular expressions"))
    )
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SettingError(f"{key}.names: {pattern!r} is not a regular expression ({exc})") from None
    return patterns


def part_names(accelerators: dict[str, Accelerator]) -> tuple[tuple[str, str], ...]:
    """(pattern, key) for every part-name pattern of the catalogue: what `part_key` matches against."""
    return tuple((pattern, key) for key, accelerator in sorted(accelerators.items()) for pattern in accelerator.names)


def part_key(names: tuple[tuple[str, str], ...], part_name: str) -> str | None:
    """The catalogue key of a vendor's part name: the entry whose pattern matches the longest stretch
    of it, so "H200 NVL" (h200-nvl) beats "H200" (h200) and "GB300" beats "B300"; None when no pattern
    matches, or when two keys match equally long stretches (the name is ambiguous)."""
    best: dict[str, int] = {}
    for pattern, key in names:
        for match in re.finditer(pattern, part_name, flags=re.IGNORECASE):
            best[key] = max(best.get(key, 0), match.end() - match.start())
    if not best:
        return None
    longest = max(best.values())
    keys = [key for key, length in best.items() if length == longest]
    return keys[0] if len(keys) == 1 else None


def load_catalogue(path) -> dict[str, Accelerator]:
    try:
        return {
            accelerator.key: accelerator
            for accelerator in (_accelerator(key, spec) for key, spec in read_yaml(path).items())
        }
    except SettingError as exc:
        raise ConfigError(f"accelerator catalogue {path}: {exc}") from None


def peak_table(accelerators: dict[str, Accelerator]) -> dict[str, float]:
    """The peak lookup the pipeline carries: accelerator -> bf16 peak, and
    `accelerator/precision` -> that precision's peak (see `peak_of`).

    A flat dict of strings, so it pickles small and a test may pass
    {accelerator: peak} alone for bf16."""
    table = {key: accelerator.peak_bf16_flops for key, accelerator in accelerators.items()}
    table.update(
        {
            f"{key}/{precision}": peak
            for key, accelerator in accelerators.items()
            for precision, peak in accelerator.peak_flops.items()
        }
    )
    return table


def peak_of(table: dict[str, float], accelerator: str, precision: str | None) -> float | None:
    """Peak FLOP/s per chip of `accelerator` in `precision` (bf16 when None);
    None when the catalogue gives no peak for that precision on that part."""
    if precision is None or precision == DEFAULT_PRECISION:
        return table[accelerator]
    return table.get(f"{accelerator}/{precision}")


@dataclass(frozen=True)
class SettingsFile:
    """A settings file (--config) read and parsed once: its mapping, safely parsed (`read_yaml`), and
    where it was read from, whose folder a relative catalogue path is taken from. A run reads its file
    into one where its options are built (fleet_goodput/core/options.py) and hands that down: its
    `beam:` section, its settings (`named`, checked once, the catalogue it names read once) and its
    `runs:` section are each taken from it, never from the file again. The mapping is the
    file's as parsed; nothing changes it."""

    path: str
    raw: dict = field(hash=False)  # a run's options stay hashable: the path stands for the file

    @classmethod
    def read(cls, path: str | Path) -> SettingsFile:
        return cls(str(path), read_yaml(path))

    @property
    def folder(self) -> Path:
        return Path(self.path).parent

    @cached_property
    def named(self) -> dict:
        """The pipeline settings the file names, checked, as {Settings field: value}; ConfigError for a
        mistake. Kept once made, so a run's check at its edge and its layering under the lock share them."""
        return _named(self.raw, self.folder, self.path)

    def __str__(self) -> str:  # messages name the file as it was given
        return self.path


def settings_file(config: str | Path | SettingsFile) -> SettingsFile:
    """`config` parsed: read now if it is a path, as it is if it was read already."""
    return config if isinstance(config, SettingsFile) else SettingsFile.read(config)


def load_settings(path: str | Path | SettingsFile | None = None, base: Settings | None = None) -> Settings:
    """`base` (by default the bundled defaults), with the keys of `path` (if given; a file's path or
    the file already read) replacing its.

    A store passes the settings it keeps as `base` (fleet_goodput/store/stored_settings.py),
    so a file that names only some keys changes only those."""
    if base is None:
        base = bundled_settings()
    if path is None:
        return base
    return dataclasses.replace(base, **settings_file(path).named)


@cache
def bundled_settings() -> Settings:
    """The bundled defaults, configs/default.yaml and the catalogue it names, read once a process: they are
    part of the installed package, so they cannot change while it runs (a user's settings file is read
    each time it is named). Shared by every caller, so never changed in place: `dataclasses.replace` it."""
    return Settings(**_named(read_yaml(DEFAULT_CONFIG), Path(str(DEFAULT_CONFIG)).parent, DEFAULT_CONFIG))


def _named(raw: dict, folder: Path, path) -> dict:
    """The settings `raw` names, checked, as {Settings field: value} (a catalogue path relative to `folder`)."""
    unknown = set(raw) - set(SETTING_KEYS) - _FOREIGN_KEYS
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(sorted(map(str, unknown)))} in {path}; "
            f"known: {', '.join(SETTING_KEYS)}, and the sections {', '.join(SECTIONS)}"
        )
    named = {}
    try:
        if "window_s" in raw:
            named["window_s"] = check_window_s(raw["window_s"])
        if "size_classes" in raw:
            named["size_classes"] = size_classes_of(raw["size_classes"])
        catalogue_path = (
            Path(text(raw["accelerators"], "accelerators", "the path of a catalogue file"))
            if "accelerators" in raw
            else None
        )
    except SettingError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    if catalogue_path is not None:
        named["accelerators"] = load_catalogue(
            catalogue_path if catalogue_path.is_absolute() else folder / catalogue_path
        )
    return named


def check_window_s(window_s) -> int:
    """A whole number of seconds that divides a day, so windows line up with days."""
    if isinstance(window_s, bool) or not isinstance(window_s, int) or window_s <= 0 or 86400 % window_s:
        raise expected("window_s", "a whole number of seconds that divide a day (86400) evenly, such as 3600", window_s)
    return window_s


def size_classes_of(raw) -> tuple[SizeClass, ...]:
    """The size classes a settings file lists, checked: each a `{name, max_chips}` with a unique
    name and a limit above the one before; a `max_chips: null` (no limit) only last."""
    classes = []
    for index, entry in enumerate(listing(raw, "size_classes", "a list of {name, max_chips}")):
        where = f"size_classes[{index}]"
        known_keys(mapping(entry, where, "a mapping {name, max_chips}"), where, ("name", "max_chips"))
        name = text(entry["name"], f"{where}.name")
        limit = None if entry["max_chips"] is None else whole(entry["max_chips"], f"{where}.max_chips", "chips", 1)
        if any(c.name == name for c in classes):
            raise SettingError(f"{where}.name: {name!r} names an earlier class too; names must be unique")
        if classes and classes[-1].max_chips is None:
            raise SettingError(f"{where}: follows a class with no limit (max_chips: null), so no job could be in it")
        if classes and limit is not None and limit <= classes[-1].max_chips:
            raise SettingError(
                f"{where}.max_chips: expected more than the {classes[-1].max_chips} chips of the "
                f"class before, got {limit}"
            )
        classes.append(SizeClass(name, limit))
    if not classes:
        raise SettingError("size_classes: expected at least one class, got an empty list")
    return tuple(classes)


# The pipeline settings a file may name; the defaults name them all.
SETTING_KEYS = ("window_s", "accelerators", "size_classes")
# The sections other readers of the same file take (`beam_flags`; fleet_goodput/core/run_settings.py, whose
# section older files call `streaming`): the pipeline settings leave them to those. Nothing else is read,
# so any other key is refused rather than left to mean nothing.
SECTIONS = ("beam", "runs", "report")
_FOREIGN_KEYS = {*SECTIONS, "streaming"}


# A Beam pipeline option's name, as Beam's argument parser accepts it.
_OPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPTION_VALUE = "a string, number or true/false, or a list of them"


def beam_flags(path: str | Path | SettingsFile | None) -> list[str]:
    """Pipeline options from the `beam:` section of a settings file (its path, or the file already read), as flags.

    Command-line Beam flags come after these, so they override them.
    """
    if path is None:
        return []
    section = settings_file(path).raw.get("beam") or {}
    try:
        return [
            flag
            for name, value in mapping(section, "beam", "a mapping of pipeline options").items()
            for flag in _beam_flag(name, value)
        ]
    except SettingError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


# A dashboard the report points to: an http(s) URL of printable ASCII (it is shown, never fetched).
_DASHBOARD_URL = re.compile(r"https?://[!-~]{1,2000}")
MAX_DASHBOARDS = 20


def report_dashboards(path: str | Path | SettingsFile | None) -> tuple[tuple[str, str], ...]:
    """The `report:` section's `dashboards`, {title: URL}, in the file's order: the Grafana dashboards of the
    fleet's metrics (docs/monitoring.md), which the report names beside its figures."""
    if path is None:
        return ()
    section = settings_file(path).raw.get("report") or {}
    try:
        known_keys(mapping(section, "report", "a mapping with the key dashboards"), "report", (), ("dashboards",))
        dashboards = mapping(section.get("dashboards") or {}, "report.dashboards", "a mapping of titles to URLs")
        if len(dashboards) > MAX_DASHBOARDS:
            raise expected("report.dashboards", f"at most {MAX_DASHBOARDS} dashboards", f"{len(dashboards)}")
        for title, url in dashboards.items():
            if not isinstance(title, str) or not title.strip() or not title.isprintable() or len(title) > 200:
                raise expected("report.dashboards", "titles of printable text up to 200 characters", title)
            if not isinstance(url, str) or not _DASHBOARD_URL.fullmatch(url):
                raise expected(f"report.dashboards.{title}", "an http:// or https:// URL of printable ASCII", url)
    except SettingError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return tuple(dashboards.items())


def _beam_flag(name, value) -> list[str]:
    if not isinstance(name, str) or not _OPTION_NAME.fullmatch(name):
        raise expected("beam", "option names of letters, digits and _", name)
    if isinstance(value, bool):
        return [f"--{name}" if value else f"--no_{name}"]
    if isinstance(value, list) and all(isinstance(item, (str, int, float)) for item in value):
        return [f"--{name}={item}" for item in value]
    if not isinstance(value, (str, int, float)):
        raise expected(f"beam.{name}", _OPTION_VALUE, value)
    return [f"--{name}={value}"]


def _one_line(error: yaml.YAMLError) -> str:
    """PyYAML's error as one line: what is wrong and where (line and column from 1), without its excerpt."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(error).split())
