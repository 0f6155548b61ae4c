"""What every importer shares: building records, rejections, and writing the output folder.

An importer reads a public trace into an `Imported` (the three streams as
records of the contract's schemas, the rejections, the caveats and a provenance
record); `write_import` then writes it as DIR/{scheduler,runtime,profiler}/part-*.avro,
DIR/import_rejected.jsonl, DIR/import_caveats.jsonl and DIR/SOURCE.json. Output is deterministic (records
sorted, event ids derived from the source, a fixed Avro sync marker, no wall
clock anywhere) and atomic: the folder is built under a temporary name beside
DIR and renamed into place only once complete, so a failed import leaves
nothing that looks like a finished one.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import fastavro
from tqdm import tqdm

from fleet_goodput import console, schemas
from fleet_goodput.core.timeutil import micros_of
from fleet_goodput.importers.records import Records
from fleet_goodput.safe_text import printable
from fleet_goodput.telemetry import observed as statement
from fleet_goodput.telemetry import queue_quotas
from fleet_goodput.telemetry.avro_io import write_events

REJECTED_FILE = "import_rejected.jsonl"
CAVEATS_FILE = "import_caveats.jsonl"
SOURCE_FILE = "SOURCE.json"
RECORDS_PER_PART = 200_000
MICROS = 1_000_000
# Limits on what one input may make an import hold or emit (docs/importers.md, "Limits").
# A JSON document takes several times its size in memory once parsed.
DEFAULT_MAX_EXPANDED_MIB = 512
DEFAULT_MAX_EXPANDED_BYTES = DEFAULT_MAX_EXPANDED_MIB << 20
# Event times: 1970 up to 2100. A clock outside is corrupt or hostile (and past ±2**63 µs
# no Avro long could hold it).
LATEST_US = 4_102_444_800 * MICROS  # 2100-01-01T00:00:00Z
MAX_CHIPS = 2**31 - 1  # the contract's `chips` is an Avro int
# The most chips one job or one fleet level may plausibly hold, as the pipeline's clean rows bound them
# (telemetry/columnar.py, MAX_CHIPS): past the largest fleets by two orders of magnitude.
PLAUSIBLE_CHIPS = 2**20


class SourceError(ValueError):
    """A source file that cannot be read as its format: corrupt, truncated, or not that format.

    The message names the file and, where it can, the line (or record) at fault.
    """

    def __init__(self, path: Path | str, where: str | None, problem: str):
        self.path, self.where, self.problem = str(path), where, problem
        super().__init__(f"{path}{f':{where}' if where else ''}: {problem}")


class UsageError(ValueError):
    """Bad arguments for this source: a required flag the source does not make up for, or one
    that contradicts it. `mpg import` exits 2 (exits.USAGE) with the message, which names the flag."""


class Refused(SourceError):
    """An input past one of the limits: it expands past the cap, is nested too deep, or holds
    numbers that are not finite. An importer of many inputs (traces, runs, log lines) rejects it
    and goes on; where it is the only input, the import stops with it."""

    def __init__(self, path: Path | str, where: str | None, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(path, where, f"{reason}{f' ({detail})' if detail else ''}")


class Unmappable(ValueError):
    """A record that parses but cannot be mapped: `reason` is generic (rejections group by it)."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}{f' ({detail})' if detail else ''}")


@dataclass(frozen=True)
class Options:
    """Settings an importer may use; each importer says which it needs."""

    accelerators: frozenset[str]  # keys of the accelerator catalogue
    part_names: tuple[tuple[str, str], ...] = ()  # the catalogue's (part-name pattern, key): config.part_names
    peaks: tuple[tuple[str, float], ...] = ()  # the catalogue's peaks, config.peak_table's items: named in caveats
    limit: int | None = None  # import only the first N jobs (pods, runs, traces) of the source
    accelerator: str | None = None
    chips: int | None = None
    cluster: str | None = None
    start_us: int | None = None
    max_expanded_bytes: int = DEFAULT_MAX_EXPANDED_BYTES  # what one file (or line) may hold, decompressed
    job: str | None = None  # the job id, for a source that names none (logs, orbax)
    submit_us: int | None = None  # logs: when the job was submitted (the log starts later)
    profile: str | None = None  # logs: the log profile's name
    profiles: Path | None = None  # logs: a YAML file of profiles added to the built-in ones
    accelerator_labels: str | None = None  # kubernetes: a YAML of label values → catalogue keys to add
    timezone: str | None = None  # slurm: the zone sacct printed its times in (None: UTC)
    accelerator_map: object = None  # slurm: an AcceleratorMap (GRES type / partition → catalogue key)


@dataclass(frozen=True)
class Rejection:
    file: str  # the source file, relative to SOURCE
    where: str  # line or record that held it
    item: str  # the job, pod or entry it concerns
    reason: str  # generic, so rejections group by it
    detail: str = ""

    def row(self) -> dict:
        return {"file": self.file, "where": self.where, "item": self.item, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class Caveat:
    """Something imported whose figures the source leaves partly unknown or assumed
    (a run that died, steps no count gives): said per item, not silently."""

    file: str
    item: str
    caveat: str  # generic, so caveats group by it
    detail: str = ""

    def row(self) -> dict:
        return {"file": self.file, "item": self.item, "caveat": self.caveat, "detail": self.detail}


@dataclass
class Imported:
    importer: str
    # Each stream's records, held compactly (fleet_goodput/importers/records.py): used as lists of dicts.
    streams: dict[str, Records] = field(default_factory=lambda: {stream: Records(stream) for stream in schemas.STREAMS})
    rejections: list[Rejection] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)  # written to SOURCE.json beside the counts
    # What the source observed of each cluster, {cluster: (from_us, to_us)}: None for a finished history,
    # whose period runs from its first record to its last (`history_periods`); a live source sets it.
    observed: dict[str, tuple[int, int]] | None = None
    # Queue quota levels the scheduler files state (fleet_goodput/telemetry/queue_quotas.py): Kueue's.
    queue_quotas: list[dict] = field(default_factory=list)

    def periods(self) -> dict[str, tuple[int, int]] | None:
        """What the import's scheduler files state it observed (fleet_goodput/telemetry/observed.py)."""
        return self.observed if self.observed is not None else history_periods(self.streams)

    def reject(self, file: str, where: str, item: str, reason: str, detail: str = "") -> None:
        self.rejections.append(Rejection(file, where, item, reason, detail))

    def caveat(self, file: str, item: str, caveat: str, detail: str = "") -> None:
        self.caveats.append(Caveat(file, item, caveat, detail))


class JobEmitter:
    """Records of one job, with event ids that depend only on the job and the order of emission.

    Ids are `{prefix}/{job_id}/{s|r|p}{n:05d}`: zero-padded so that two
    scheduler events of one job at the same instant (a PREEMPT then an
    ALLOCATE) are applied in the order they were emitted.
    """

    def __init__(self, imported: Imported, prefix: str, job_id: str, cluster: str, accelerator: str):
        self.imported, self.prefix, self.job_id = imported, prefix, job_id
        self.cluster, self.accelerator = cluster, accelerator
        self._counts = Counter()

    def _id(self, letter: str) -> str:
        self._counts[letter] += 1
        return f"{self.prefix}/{self.job_id}/{letter}{self._counts[letter]:05d}"

    def scheduler(self, type_: str, time_us: int, chips: int, **submit) -> None:
        record = {
            "event_id": self._id("s"),
            "event_time": int(time_us),
            "job_id": self.job_id,
            "type": type_,
            "cluster": self.cluster,
            "accelerator": self.accelerator,
            "chips": int(chips),
            "workload": None,
            "framework": None,
            "team": None,
            "topology": None,
            "priority": None,
        }
        record.update(submit)
        self.imported.streams["scheduler"].append(record)

    def runtime(self, type_: str, time_us: int, step: int | None = None, attempt: int | None = None) -> None:
        self.imported.streams["runtime"].append(
            {
                "event_id": self._id("r"),
                "event_time": int(time_us),
                "job_id": self.job_id,
                "type": type_,
                "step": step,
                "attempt": attempt,
            }
        )

    def span(
        self,
        kind: str,
        start_us: int,
        end_us: int | None,
        start_step: int | None = None,
        end_step: int | None = None,
        attempt: int | None = None,
    ) -> None:
        """`kind`_START at start_us and, unless end_us is None (never ended), `kind`_END at end_us."""
        self.runtime(f"{kind}_START", start_us, start_step, attempt)
        if end_us is not None:
            self.runtime(f"{kind}_END", end_us, end_step, attempt)

    def profile(
        self,
        time_us: int,
        step: int,
        duration_s: float,
        chips: int,
        ideal_flops: float,
        flops_source: str,
        precision: str | None = None,
    ) -> None:
        """A profiler sample; `precision` None means bf16 (the source does not say otherwise)."""
        self.imported.streams["profiler"].append(
            {
                "event_id": self._id("p"),
                "event_time": int(time_us),
                "job_id": self.job_id,
                "step": int(step),
                "duration_s": float(duration_s),
                "chips": int(chips),
                "ideal_flops": float(ideal_flops),
                "flops_source": flops_source,
                "bytes_accessed": None,
                "precision": precision,
            }
        )


def assumed_peak(options: Options, accelerator: str) -> str:
    """The caveat's detail for a PG measured against the bf16 peak because the source states no
    precision: which peak that is, and what PG would be against the faster ones the part has."""
    peaks = dict(options.peaks)
    if accelerator not in peaks:
        return f"PG measured against the {accelerator} bf16 peak"
    bf16 = peaks[accelerator]
    faster = [
        (precision, peaks[f"{accelerator}/{precision}"])
        for precision in ("fp8", "fp4")
        if f"{accelerator}/{precision}" in peaks
    ]
    return f"PG measured against the {accelerator} bf16 peak, {bf16 / 1e12:,.0f} TFLOP/s per chip" + "".join(
        f"; had it trained in {precision} ({peak / 1e12:,.0f} TFLOP/s), PG would be {bf16 / peak:.2g} x as high"
        for precision, peak in faster
    )


def capacity(imported: Imported, prefix: str, cluster: str, accelerator: str, time_us: int, chips: int) -> None:
    """A CAPACITY level (chips online from `time_us` on) for one cluster and accelerator."""
    imported.streams["scheduler"].append(
        {
            "event_id": f"{prefix}/capacity/{cluster}/{accelerator}/{time_us}",
            "event_time": int(time_us),
            "job_id": None,
            "type": "CAPACITY",
            "cluster": cluster,
            "accelerator": accelerator,
            "chips": int(chips),
            "workload": None,
            "framework": None,
            "team": None,
            "topology": None,
            "priority": None,
        }
    )


def subtract(start_us: int, end_us: int, holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start_us, end_us) minus the union of `holes`, as sorted non-empty pieces."""
    pieces, cursor = [], start_us
    for hole_start, hole_end in sorted(holes):
        if hole_end <= cursor or hole_start >= end_us:
            continue
        if hole_start > cursor:
            pieces.append((cursor, hole_start))
        cursor = max(cursor, hole_end)
    if cursor < end_us:
        pieces.append((cursor, end_us))
    return pieces


def progress(iterable, description: str, total: int | None = None, unit: str = "rec"):
    """A progress bar on stderr; silent when stderr is not a terminal (tests, pipes)."""
    # tqdm redraws its bar with carriage returns, which console's escaping stream would show as \x0d.
    return tqdm(
        iterable,
        desc=printable(description),
        total=total,
        unit=unit,
        file=console.unescaped(sys.stderr),
        disable=None,
        leave=False,
    )


def utc_us(text: str, fmt: str = "%Y-%m-%d %H:%M:%S") -> int:
    """A zone-less timestamp string, read as UTC, in microseconds since the epoch."""
    try:
        moment = datetime.strptime(str(text), fmt).replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise Unmappable("unparseable time", f"{text!r} is not {fmt}") from exc
    return int(moment.timestamp()) * MICROS + moment.microsecond


def seconds_to_us(seconds: float) -> int:
    return int(round(seconds * MICROS))


def event_time_us(value, what: str, unit_us: int = 1) -> int:
    """`value` (in units of `unit_us` µs since the epoch) as µs: a finite number from 1970 up to
    2100, else Unmappable showing `value` as the source gives it."""
    scaled = value * unit_us if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    # An int stays exact however large (math.isfinite would overflow converting it); a float may be inf or NaN.
    if scaled is None or (isinstance(scaled, float) and not math.isfinite(scaled)) or not 0 <= scaled < LATEST_US:
        raise Unmappable(f"{what} is not a time from 1970 up to 2100", repr(value)[:80])
    return int(scaled)


def chip_count(value, what: str, most: int = MAX_CHIPS) -> int:
    """`value` as a count of chips: a whole number from 1 up to `most` (by default what the contract
    holds), else Unmappable."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise Unmappable(f"{what} is not a whole number of chips from 1 to {most:,}", repr(value))
    return value


def file_digest(path: Path) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def read_text(path: Path, limit: int) -> str:
    """The UTF-8 text of `path`, gunzipped (streamed) if its name ends in .gz; Refused once it
    passes `limit` bytes, so a small file that expands to gigabytes is never held."""
    try:
        with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise SourceError(path, None, f"corrupt or truncated gzip stream ({exc})") from exc
    if len(data) > limit:
        unpacked = " once decompressed" if path.name.endswith(".gz") else ""
        raise Refused(path, None, f"larger than {limit >> 20:,} MiB{unpacked}", "--max-expanded-mib raises the limit")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(path, f"byte {exc.start}", "not UTF-8 text") from exc


def bounded_lines(handle, limit: int):
    """(line number, line) of a file open for reading (text or bytes), never holding more than
    `limit` of one line: a longer line is read past in pieces and given as None."""
    number = 0
    while line := handle.readline(limit + 1):
        number += 1
        if len(line) <= limit:
            yield number, line
            continue
        while line and line[-1:] not in ("\n", b"\n"):
            line = handle.readline(limit + 1)
        yield number, None


def too_long(limit: int) -> Unmappable:
    return Unmappable(f"a line longer than {limit >> 20:,} MiB", "--max-expanded-mib raises the limit")


class _NotFinite(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NotFinite(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 reads as inf
        raise _NotFinite(text)
    return value


_STRICT_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float)


def decode_json(text: str):
    """Parse JSON refusing what no telemetry holds: NaN, Infinity and numbers too large for a float
    (Unmappable), and nesting deeper than the parser's recursion limit (Unmappable, not a crash).
    A syntax error raises json.JSONDecodeError as json.loads does."""
    return _strictly(_STRICT_DECODER.decode, text)


def decode_json_at(text: str, position: int) -> tuple[object, int]:
    """`decode_json` of the one JSON value starting at `position` of `text`: (the value, where it ends)."""
    return _strictly(_STRICT_DECODER.raw_decode, text, position)


def _strictly(parse, *args):
    try:
        return parse(*args)
    except _NotFinite as exc:
        raise Unmappable("a number that is not finite (NaN, Infinity or too large)", str(exc)[:40]) from None
    except RecursionError:
        raise Unmappable(
            "JSON nested too deeply to read", f"more than about {sys.getrecursionlimit():,} levels"
        ) from None


def load_json(path: Path, limit: int):
    """The JSON document in `path` (gunzipped if .gz), at most `limit` bytes of text: a syntax
    error (a truncated file, say) names the line and column; a document past a limit is Refused."""
    text = read_text(path, limit)
    try:
        return decode_json(text)
    except json.JSONDecodeError as exc:
        raise SourceError(
            path, f"{exc.lineno}:{exc.colno}", f"not valid JSON ({exc.msg}); is the file truncated?"
        ) from exc
    except Unmappable as exc:
        raise Refused(path, None, exc.reason, exc.detail) from None


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise SourceError(path, None, f"missing: expected {what}")
    return path


# ---- writing ----------------------------------------------------------------
def _sync_marker(importer: str, stream: str, part: int | str) -> bytes:
    return hashlib.sha256(f"fleet-goodput import {importer} {stream} {part}".encode()).digest()[:16]


def history_periods(streams: dict[str, list[dict]]) -> dict[str, tuple[int, int]] | None:
    """What a finished history observed of each cluster: from the cluster's first record (of any stream;
    a job's runtime and profiler records count toward its SUBMIT's cluster) to the history's last record.
    A history is read whole, so every cluster in it is known up to its end: a cluster whose records stop
    earlier was quiet, not unobserved (one whose run ended first must not hold the others back). None
    where no scheduler record names a cluster."""
    cluster_of = {r["job_id"]: r["cluster"] for r in streams.get("scheduler", []) if r["type"] == "SUBMIT"}
    first: dict[str, int] = {}
    last = None
    for stream, records in streams.items():
        for record in records:
            time_us = micros_of(record["event_time"])
            last = time_us if last is None else max(last, time_us)
            cluster = record["cluster"] if stream == "scheduler" else cluster_of.get(record["job_id"])
            if cluster is not None:
                first[cluster] = min(first.get(cluster, time_us), time_us)
    return {cluster: (start, last) for cluster, start in sorted(first.items())} or None


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
