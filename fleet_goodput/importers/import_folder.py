"""Writing an import's output folder: a new one atomically, or the new events appended to an earlier one.

`write_import` writes an `Imported` (fleet_goodput/importers/common.py) as
DIR/{scheduler,runtime,profiler}/part-*.avro, DIR/import_rejected.jsonl,
DIR/import_caveats.jsonl and DIR/SOURCE.json. Output is deterministic (records
sorted, event ids derived from the source, a fixed Avro sync marker, no wall
clock anywhere) and atomic: the folder is built under a temporary name beside
DIR and renamed into place only once complete, so a failed import leaves
nothing that looks like a finished one. `append_import` adds to an earlier
import only the events it does not hold yet.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path


from fleet_goodput import schemas
from fleet_goodput.importers.common import Imported
from fleet_goodput.importers.records import Records
from fleet_goodput.telemetry import observed as statement
from fleet_goodput.telemetry import queue_quotas
from fleet_goodput.telemetry.avro_io import write_events

REJECTED_FILE = "import_rejected.jsonl"
CAVEATS_FILE = "import_caveats.jsonl"
SOURCE_FILE = "SOURCE.json"
RECORDS_PER_PART = 200_000


def _sync_marker(importer: str, stream: str, part: int | str) -> bytes:
    return hashlib.sha256(f"fleet-goodput import {importer} {stream} {part}".encode()).digest()[:16]


def stated_periods(folder: Path) -> dict[str, tuple[int, int]]:
    """What the scheduler files in `folder` state together (fleet_goodput/telemetry/observed.py; their
    headers only)."""
    stated = []
    for path in sorted((folder / "scheduler").glob("*.avro")):
        with open(path, "rb") as handle:
            stated.append(statement.statement_of(handle) or {})
    return statement.union(*stated)


def _write_stream(
    folder: Path,
    importer: str,
    stream: str,
    records: Records | list[dict],
    observed: dict[str, tuple[int, int]] | None = None,
    quotas: list[dict] | None = None,
) -> None:
    held = records if isinstance(records, Records) else Records(stream, records)
    rows = held.sorted_by("event_time", "event_id")  # tuples: made dicts a part at a time, as written
    parts = max(1, -(-len(rows) // RECORDS_PER_PART))
    (folder / stream).mkdir(parents=True)
    for part in range(parts):
        chunk = held.as_records(rows[part * RECORDS_PER_PART : (part + 1) * RECORDS_PER_PART])
        write_events(
            folder / stream / f"part-{part:05d}.avro",
            stream,
            chunk,
            sync_marker=_sync_marker(importer, stream, part),
            observed=observed,
            quotas=quotas if part == 0 else None,
        )  # stated once: the first part


def summary(imported: Imported) -> dict:
    return {
        "events": {stream: len(records) for stream, records in imported.streams.items()},
        # Jobs of any stream: an import of runtime events alone (orbax) is joined to its scheduler stream later.
        "jobs": len({r["job_id"] for records in imported.streams.values() for r in records if r["job_id"]}),
        "rejected": dict(sorted(Counter(r.reason for r in imported.rejections).items())),
        "caveats": dict(sorted(Counter(c.caveat for c in imported.caveats).items())),
    }


def write_import(imported: Imported, out_dir: str | Path, overwrite: bool = False) -> dict:
    """Write `imported` to `out_dir` atomically; returns the summary that SOURCE.json holds."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; pass --overwrite to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.importing-", dir=out.parent))
    try:
        periods = imported.periods()  # the scheduler files say what the source observed
        for stream in schemas.STREAMS:
            _write_stream(
                building,
                imported.importer,
                stream,
                imported.streams[stream],
                periods if stream == "scheduler" else None,
                imported.queue_quotas if stream == "scheduler" else None,
            )
        with open(building / REJECTED_FILE, "w", encoding="utf-8") as handle:
            handle.write(_rejected_lines(imported))
        caveats = sorted((c.row() for c in imported.caveats), key=lambda row: (row["file"], row["item"], row["caveat"]))
        with open(building / CAVEATS_FILE, "w", encoding="utf-8") as handle:
            for row in caveats:
                handle.write(json.dumps(row, sort_keys=True) + "\n")
        result = summary(imported)
        document = {"importer": imported.importer, **imported.provenance, **result}
        (building / SOURCE_FILE).write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        os.chmod(building, 0o755)  # mkdtemp makes it private; the output is a normal folder
        if out.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.replaced-", dir=out.parent))
            os.replace(out, retired / "old")
            os.replace(building, out)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return result


def write_rejections_only(imported: Imported, out_dir: str | Path) -> Path | None:
    """An import with nothing usable: its rejected rows alone, written to OUT's rejections file when OUT is
    new or empty (an earlier import's folder is left as it is: None). No telemetry is written."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return None
    out.mkdir(parents=True, exist_ok=True)
    _replace_text(out / REJECTED_FILE, _rejected_lines(imported))
    return out / REJECTED_FILE


def _rejected_lines(imported: Imported) -> str:
    """The rejections file's text: a JSON line per rejected input, in a stable order."""
    rows = sorted(
        (r.row() for r in imported.rejections), key=lambda row: (row["file"], row["where"], row["item"], row["reason"])
    )
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def append_import(imported: Imported, out_dir: str | Path) -> dict:
    """Add to `out_dir`, an earlier import of the same format, the events whose ids it does not hold,
    as one new part file per stream; returns the summary of `imported` with `appended` (new events per
    stream). Re-importing overlapping inputs (rolling watch files that re-list, a file read twice)
    so adds only what is new, and `mpg run` reads only the new part files. A folder that does not
    exist yet is written whole, as `write_import` does."""
    out = Path(out_dir)
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return {**write_import(imported, out), "appended": dict(summary(imported)["events"])}
    try:
        earlier = json.loads((out / SOURCE_FILE).read_text(encoding="utf-8"))["importer"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FileExistsError(
            f"{out} is not an earlier import (no readable {SOURCE_FILE}): cannot append to it"
        ) from exc
    if earlier != imported.importer:
        raise FileExistsError(f"{out} holds a {earlier} import: cannot append {imported.importer} events to it")
    appended = {}
    for stream in schemas.STREAMS:
        held = {record["event_id"] for path in sorted((out / stream).glob("*.avro")) for record in _records(path)}
        new = [r for r in imported.streams[stream] if r["event_id"] not in held]
        appended[stream] = len(new)
        periods = imported.periods() if stream == "scheduler" else None
        if periods and not new:
            held_periods = stated_periods(out)
            if statement.union(held_periods, periods) == held_periods:
                periods = None  # the files there state it already: nothing to add
        quotas = _new_quotas(out, imported.queue_quotas) if stream == "scheduler" else []
        if new or periods or quotas:
            # Nothing new still says how far the source has now observed (a quiet watch).
            ids = sorted(r["event_id"] for r in new) or [json.dumps([periods, quotas], sort_keys=True)]
            name = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
            records = sorted(new, key=lambda r: (r["event_time"], r["event_id"]))
            write_events(
                out / stream / f"append-{name}.avro",
                stream,
                records,
                sync_marker=_sync_marker(imported.importer, stream, name),
                observed=periods,
                quotas=quotas,
            )
    for file_name, rows in (
        (REJECTED_FILE, [r.row() for r in imported.rejections]),
        (CAVEATS_FILE, [c.row() for c in imported.caveats]),
    ):
        _append_lines(out / file_name, [json.dumps(row, sort_keys=True) for row in rows])
    result = {**summary(imported), "appended": appended}
    document = {"importer": imported.importer, **imported.provenance, **result}
    _replace_text(out / SOURCE_FILE, json.dumps(document, indent=2) + "\n")
    return result


def _new_quotas(folder: Path, quotas: list[dict]) -> list[dict]:
    """The quota levels among `quotas` that the scheduler files in `folder` do not state yet."""
    held = set()
    for path in sorted((folder / "scheduler").glob("*.avro")):
        with open(path, "rb") as handle:
            held |= {tuple(sorted(level.items())) for level in queue_quotas.levels_of(handle)}
    return [level for level in quotas if tuple(sorted(level.items())) not in held]


def _records(path: Path):
    import fastavro  # here, not at the top: `mpg --help` lists `mpg import` without it

    with open(path, "rb") as handle:
        yield from fastavro.reader(handle)


def _append_lines(path: Path, lines: list[str]) -> None:
    """Add the lines `path` does not hold yet, in order."""
    held = set(path.read_text(encoding="utf-8").splitlines()) if path.exists() else set()
    new = [line for line in dict.fromkeys(lines) if line not in held]
    if new:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in new))


def _replace_text(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
