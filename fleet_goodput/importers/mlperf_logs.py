"""MLPerf Training result logs, read: which logs a source holds, and the `:::MLLOG` records of each.

A source is the results repository as MLCommons publishes it
(`<submitter>/results/<system>/<benchmark>/result_<n>.txt` with `<submitter>/systems/<system>.json`),
a flat folder (`results/<org>__<system>__<benchmark>__result_<n>.txt` with `systems/<org>__<system>.json`),
or one log of either layout. A log is read line by line within the import's limits: its
`:::MLLOG` records, and the low precisions the framework's own lines switch on. Nothing is
mapped here: fleet_goodput/importers/mlperf.py maps a run's records to events.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput.importers.common import DEFAULT_MAX_EXPANDED_BYTES, SourceError, Unmappable
from fleet_goodput.importers.reading import bounded_lines, decode_json, event_time_us, too_long

MARKER = ":::MLLOG"
MILLIS = 1000  # µs per ms
# A framework configuration line that switches a low precision on, as the logs
# print it: `fp8: true`, `fp8='e4m3'`, `fp8: hybrid` (after an optional rank prefix `0:`).
PRECISION_SETTING = re.compile(rb"^\s*(?:\d+:)?\s*(?:use_)?(?:nv)?(fp8|fp4)\s*[:=]\s*['\"]?([^'\",\s]*)", re.IGNORECASE)
OFF_VALUES = {b"", b"false", b"none", b"null", b"0", b"off", b"no"}


def mllog_records(path: Path, limit: int = DEFAULT_MAX_EXPANDED_BYTES) -> tuple[list[tuple[int, dict]], dict[str, str]]:
    """(line number, record) of every `:::MLLOG` line, and the low precisions the
    other lines (the framework's own output) switch on: {precision: evidence}."""
    records, precisions = [], {}
    with open(path, "rb") as handle:
        for number, raw in bounded_lines(handle, limit):
            if raw is None:
                exc = too_long(limit)
                raise Unmappable(exc.reason, f"line {number}: {exc.detail}")
            position = raw.find(MARKER.encode())
            if position < 0:
                setting = PRECISION_SETTING.match(raw)
                if setting and setting.group(2).lower() not in OFF_VALUES:
                    precisions.setdefault(
                        setting.group(1).decode().lower(),
                        f"line {number}: {raw.decode('utf-8', 'replace').strip()[:80]}",
                    )
                continue
            try:
                record = decode_json(raw[position + len(MARKER) :].decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise SourceError(
                    path, f"line {number}", f"`{MARKER}` line that is not valid JSON; is the file truncated? ({exc})"
                ) from exc
            except Unmappable as exc:
                raise Unmappable(exc.reason, f"line {number}: {exc.detail}") from None
            if (
                not isinstance(record, dict)
                or "key" not in record
                or not isinstance(record.get("time_ms"), (int, float))
            ):
                raise SourceError(path, f"line {number}", f"`{MARKER}` record without a key or a numeric time_ms")
            try:
                event_time_us(record["time_ms"], "time_ms", MILLIS)
            except Unmappable as exc:
                raise Unmappable(exc.reason, f"line {number}: {exc.detail}") from None
            records.append((number, record))
    return records, precisions


@dataclass(frozen=True)
class ResultLog:
    """One result log, and where its system is described."""

    path: Path
    file: str  # as rejections and caveats name it: relative to SOURCE
    job_id: str  # <submitter>__<system>__<benchmark>__result_<n>
    system_name: str  # <submitter>__<system>: the cluster
    benchmark: str
    system_path: Path | None  # None: no description; --accelerator and --chips must say


def _flat_log(path: Path, file: str) -> ResultLog:
    """`<folder>/results/<org>__<system>__<benchmark>__result_<n>.txt` with `<folder>/systems/<org>__<system>.json`."""
    parts = path.stem.split("__")
    if len(parts) != 4:
        return ResultLog(path, file, path.stem, path.stem, "", None)
    system = f"{parts[0]}__{parts[1]}"
    return ResultLog(path, file, path.stem, system, parts[2], path.parent.parent / "systems" / f"{system}.json")


def _upstream_log(path: Path, file: str) -> ResultLog:
    """The results repository's own layout: `<submitter>/results/<system>/<benchmark>/result_<n>.txt`
    with `<submitter>/systems/<system>.json`."""
    where = path.absolute()  # a bare `result_0.txt` given from its own folder has no parents to name
    benchmark, system, submitter_dir = where.parent.name, where.parent.parent.name, where.parents[3]
    name = f"{submitter_dir.name}__{system}"
    return ResultLog(
        path, file, f"{name}__{benchmark}__{path.stem}", name, benchmark, submitter_dir / "systems" / f"{system}.json"
    )


def _in_upstream_layout(path: Path) -> bool:
    absolute = path.absolute()
    return len(absolute.parents) > 3 and absolute.parents[2].name == "results" and path.name.startswith("result_")


def result_logs(source: Path) -> list[ResultLog]:
    """Every result log SOURCE holds: one log file, a flat `results/` + `systems/` folder,
    or the results repository (or any part of it that holds `results/` folders)."""
    if source.is_file():
        return [(_upstream_log if _in_upstream_layout(source) else _flat_log)(source, source.name)]
    if not source.is_dir():
        raise SourceError(source, None, "no such file or folder")
    flat = [_flat_log(p, str(p.relative_to(source))) for p in sorted((source / "results").glob("*.txt"))]
    upstream = [
        _upstream_log(p, str(p.relative_to(source)))
        for p in sorted(source.rglob("result_*.txt"))
        if _in_upstream_layout(p)
    ]
    logs = flat + upstream
    if not logs:
        raise SourceError(
            source,
            None,
            "no result logs: expected results/*.txt, the results repository's "
            "<submitter>/results/<system>/<benchmark>/result_*.txt, or one log file",
        )
    return logs


def shown_path(path: Path) -> str:
    """A system description as rejections name it: systems/<name>.json."""
    return f"{path.parent.name}/{path.name}"
