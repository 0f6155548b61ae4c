"""The settings a store's figures were computed with, kept in the store with its runs.

Two readers of one store must show the same figures, and a run must not add
figures computed one way to figures computed another. So the first run of a
store keeps the settings that decide what its tables and views hold, and
every later run and every reader takes them from there:

    window_s            the event-time grid of job_window and the capacity_window view
    allowed_lateness_s  which late events still change results, and which go to `late`
    max_silence_s       how long an ended job waits for a profiler sample, which gives it its PG
    size_classes        each job's size class (the views, the report)
    accelerators        the catalogue as the runs used it: which parts are accepted, and each
                        part's peak FLOP/s per precision (ideal_chip_s, PG, MPG)

They are a Delta table, OUTPUT/settings/ (a row per change: the run that
stored them, and the settings as JSON), whose version each run's row in `runs`
names like any table's: they are committed with the run, and run N is read
with run N's. The views show them (`select * from settings`).

A settings file (--config) names some keys; they replace the store's, and the
others stay the store's. A run whose settings then differ from the store's is
refused, naming each difference, unless the difference leaves every stored
figure as it was: a part added to the catalogue (the runs rejected the events
of parts they did not know, so no figure used it), or a part's description
(vendor, source, url, memory bandwidth: no figure is computed from them). The
run stores those. A reader given a settings file that differs from the store's
in anything is refused: it would show what the store does not hold.

A store written before settings were kept has none: its runs' manifests
record window_s and allowed_lateness_s, which are taken from there; the size
classes and the catalogue are the settings file's or the defaults, as before,
and its next run stores them. A store that kept its settings before it kept
max_silence_s takes the settings file's or the default, and its next run
stores it, saying so.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fleet_goodput.core.config import (
    Accelerator,
    ConfigError,
    Settings,
    SettingsFile,
    SizeClass,
    check_window_s,
    load_settings,
    settings_file,
)
from fleet_goodput.core.run_settings import MAX_SILENCE_S, RunSettings, load_run_settings
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.layout import SETTINGS
from fleet_goodput.store.runs_table import RunRecord
from fleet_goodput.store.transaction import Transaction

SETTINGS_SCHEMA = pa.schema([("run_id", pa.int64()), ("settings", pa.string())])
# The settings kept, in the order people read them.
KEYS = ("window_s", "allowed_lateness_s", "max_silence_s", "size_classes", "accelerators")
# What an older store's manifests record.
MANIFEST_KEYS = ("window_s", "allowed_lateness_s")
# A catalogue entry's fields no figure is computed from.
DESCRIPTIVE = ("vendor", "source", "url", "hbm_bytes_per_s")
ABSENT = "(absent)"


class SettingsConflict(ConfigError):
    """Settings that differ from those a store's figures were computed with."""


@dataclass(frozen=True)
class Difference:
    setting: str  # a key of the document; accelerators.<part> or accelerators.<part>.<field> for the catalogue
    stored: object
    given: object
    harmless: bool  # every stored figure stays right: a part added to the catalogue, or a part's description

    def __str__(self) -> str:
        return f"{self.setting}: stored {_show(self.stored)}, given {_show(self.given)}"


@dataclass(frozen=True)
class ChosenSettings:
    settings: Settings
    run_settings: RunSettings
    note: str | None = None  # for a store written before settings were kept: what this run will store


def document(settings: Settings, allowed_lateness_s: int | None, max_silence_s: int = MAX_SILENCE_S) -> dict:
    """The settings as the store keeps them (JSON)."""
    return {
        "window_s": settings.window_s,
        "allowed_lateness_s": allowed_lateness_s,
        "max_silence_s": max_silence_s,
        "size_classes": [{"name": c.name, "max_chips": c.max_chips} for c in settings.size_classes],
        "accelerators": {
            key: {
                "peak_flops": dict(part.peak_flops),
                "hbm_bytes_per_s": part.hbm_bytes_per_s,
                "vendor": part.vendor,
                "source": part.source,
                "url": part.url,
            }
            for key, part in sorted(settings.accelerators.items())
        },
    }


def _document_of(settings: Settings, run_settings: RunSettings) -> dict:
    return document(settings, run_settings.allowed_lateness_s, run_settings.max_silence_s)


def kept_settings(store: Store, record: RunRecord | None) -> dict:
    """What the store knows of the settings run `record` was computed with: every key of
    `document`, or for a run from before settings were kept, what its manifest records
    ({} for no run)."""
    if record is None:
        return {}
    table = store.read(SETTINGS, record)
    if table is None:
        return {key: record.manifest[key] for key in MANIFEST_KEYS if record.manifest.get(key) is not None}
    latest = max(table.to_pylist(), key=lambda row: row["run_id"])
    return json.loads(latest["settings"])


def apply(kept: dict, base: Settings | None) -> Settings:
    """`base` with the settings `kept` holds (all of them, or an older store's window_s). `base` None:
    the bundled defaults, read only where `kept` lacks some (reading them costs a YAML parse)."""
    changes = {}
    if "window_s" in kept:
        changes["window_s"] = kept["window_s"]
    if "size_classes" in kept:
        changes["size_classes"] = tuple(SizeClass(c["name"], c["max_chips"]) for c in kept["size_classes"])
    if "accelerators" in kept:
        changes["accelerators"] = {key: Accelerator(key=key, **part) for key, part in kept["accelerators"].items()}
    if base is None and len(changes) == len(dataclasses.fields(Settings)):
        return Settings(**changes)
    return dataclasses.replace(base or load_settings(), **changes)


def settings_of(store: Store, record: RunRecord | None, fallback: Settings) -> Settings:
    """The settings run `record` was computed with; `fallback`'s where the store keeps none."""
    return apply(kept_settings(store, record), fallback)


def differences(kept: dict, given: dict) -> list[Difference]:
    """Where the `given` document differs from what the store `kept`."""
    found = [
        Difference(key, kept[key], given[key], harmless=False)
        for key in ("window_s", "allowed_lateness_s", "max_silence_s", "size_classes")
        if key in kept and kept[key] != given[key]
    ]
    if "accelerators" in kept:
        found += _catalogue_differences(kept["accelerators"], given["accelerators"])
    return found


def _catalogue_differences(kept: dict, given: dict) -> list[Difference]:
    found = []
    for key in sorted(kept.keys() | given.keys()):
        before, after = kept.get(key), given.get(key)
        if before is None or after is None:  # added: harmless; removed: its events would be rejected from now on
            found.append(
                Difference(
                    f"accelerators.{key}",
                    before["peak_flops"] if before else ABSENT,
                    after["peak_flops"] if after else ABSENT,
                    harmless=before is None,
                )
            )
            continue
        if before["peak_flops"] != after["peak_flops"]:
            found.append(
                Difference(f"accelerators.{key}.peak_flops", before["peak_flops"], after["peak_flops"], harmless=False)
            )
        found += [
            Difference(f"accelerators.{key}.{field}", before[field], after[field], harmless=True)
            for field in DESCRIPTIVE
            if before[field] != after[field]
        ]
    return found


def _show(value) -> str:
    if isinstance(value, list):  # size classes
        return (
            "["
            + ", ".join(
                f"{c['name']} (up to {c['max_chips']} chips)"
                if c["max_chips"] is not None
                else f"{c['name']} (no limit)"
                for c in value
            )
            + "]"
        )
    if isinstance(value, dict):  # peak FLOP/s per precision
        return "{" + ", ".join(f"{precision}: {peak:.6g} FLOP/s" for precision, peak in value.items()) + "}"
    return repr(value) if isinstance(value, str) and value != ABSENT else str(value)


def _layered(
    kept: dict,
    config: str | Path | SettingsFile | None,
    window_s: int | None = None,
    allowed_lateness_s: int | None = None,
) -> tuple[Settings, RunSettings]:
    """The store's settings, then those `config` names (read once here if not read already), then the
    flags given (not None)."""
    config = None if config is None else settings_file(config)
    settings = load_settings(config, base=apply(kept, load_settings()))
    if window_s is not None:
        settings = dataclasses.replace(settings, window_s=check_window_s(window_s))
    stored = {key: kept[key] for key in ("allowed_lateness_s", "max_silence_s") if key in kept}
    base = RunSettings(**stored) if stored else None
    return settings, load_run_settings(config, base=base, allowed_lateness_s=allowed_lateness_s)


# ---- runs ---------------------------------------------------------------------
def settings_for_output(
    output: str | Path | Store,
    config: str | Path | SettingsFile | None = None,
    *,
    replace: bool = False,
    allowed_lateness_s: int | None = None,
) -> ChosenSettings:
    """The settings a run on `output` computes with (`replace`: as if it held no run); see `settings_for_run`."""
    store = Store.of(output)
    return settings_for_run(store, None if replace else store.latest(), config, allowed_lateness_s=allowed_lateness_s)


def settings_for_run(
    store: Store,
    previous: RunRecord | None,
    config: str | Path | SettingsFile | None = None,
    *,
    window_s: int | None = None,
    allowed_lateness_s: int | None = None,
) -> ChosenSettings:
    """The settings of a run that continues `previous`: the store's, with those `config` names and
    the flags given replacing them. Raises SettingsConflict where they would change stored figures."""
    kept = kept_settings(store, previous)
    settings, run_settings = _layered(kept, config, window_s, allowed_lateness_s)
    _refuse_conflicts(store, previous, kept, _document_of(settings, run_settings))
    note = None
    if previous is not None and "accelerators" not in kept:
        recorded = f"{' and '.join(kept)} as its manifests record them, " if kept else ""
        given = f"{config} and " if config else ""
        note = (
            f"{store.root} was written before outputs kept their settings: this run stores those it computes "
            f"with ({recorded}the rest from {given}the defaults), and every later run and reader uses them. "
            "If its earlier runs used others, start it afresh with --replace."
        )
    elif previous is not None and "max_silence_s" not in kept:
        source = f"{config}'s or the default" if config else "the default"
        note = (
            f"{store.root} kept its settings before outputs kept max_silence_s: this run stores the one it "
            f"computes with ({run_settings.max_silence_s} s, {source}), and every later run and reader uses "
            "it. If its earlier runs used another, start it afresh with --replace."
        )
    return ChosenSettings(settings, run_settings, note)


def refuse_figure_changes(
    store: Store, previous: RunRecord | None, settings: Settings, run_settings: RunSettings
) -> None:
    """Raise SettingsConflict if a run continuing `previous` with these settings would change stored figures."""
    _refuse_conflicts(store, previous, kept_settings(store, previous), _document_of(settings, run_settings))


def commit_settings(transaction: Transaction, run_id: int, settings: Settings, run_settings: RunSettings) -> None:
    """Keep the run's settings in its commit where they are new to the store (its first run, a part
    added to the catalogue); SettingsConflict where they would change stored figures."""
    store, previous = transaction.store, transaction.previous
    kept = kept_settings(store, previous)
    given = _document_of(settings, run_settings)
    _refuse_conflicts(store, previous, kept, given)
    if given != kept:
        row = {"run_id": run_id, "settings": json.dumps(given, indent=2)}
        transaction.write(SETTINGS, pa.Table.from_pylist([row], schema=SETTINGS_SCHEMA), SETTINGS_SCHEMA)


def _refuse_conflicts(store: Store, previous: RunRecord | None, kept: dict, given: dict) -> None:
    conflicts = [d for d in differences(kept, given) if not d.harmless]
    if conflicts:
        raise SettingsConflict(
            f"{store.root} holds figures computed with other settings (run {previous.run_id}'s); this run's differ:\n"
            + "".join(f"  {d}\n" for d in conflicts)
            + "A run adds to the stored figures, so it must compute them the same way: leave the differing "
            f"settings out to use the output's (`mpg sql --output {shlex.quote(store.root)} "
            '"select * from settings"` shows them), or start the output afresh with --replace.'
        )


# ---- readers ------------------------------------------------------------------
def reader_settings(
    store: Store, record: RunRecord | None, config: str | Path | SettingsFile | None, output: str | Path
) -> Settings:
    """The settings run `record` of `store` (checked whole already; `output` as the reader named it) was
    computed with; `config` is refused if it differs from them in anything (SettingsConflict)."""
    kept = kept_settings(store, record)
    settings, run_settings = _layered(kept, config)
    found = differences(kept, _document_of(settings, run_settings))
    if found:
        raise SettingsConflict(
            f"{config} differs from the settings run {record.run_id} of {output} was computed with:\n"
            + "".join(f"  {d}\n" for d in found)
            + "The output keeps its settings: read it without --config to use them."
        )
    return settings
