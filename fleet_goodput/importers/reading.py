"""Reading a source within the import's limits: its files, lines and JSON, and the times and chip counts in them.

What one input may make an import hold is bounded here (docs/importers.md, "Limits"): a file
or line past `--max-expanded-mib` is Refused or read past, JSON that is not finite or nested
too deeply is Unmappable, and so are times outside 1970 up to 2100 and chip counts the
contract cannot hold. Nothing here maps a record: the importers do (fleet_goodput/importers/common.py
holds what they map into).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import sys
import zlib
from datetime import datetime, timezone
from pathlib import Path


from fleet_goodput import console
from fleet_goodput.importers.common import Refused, SourceError, Unmappable
from fleet_goodput.safe_text import printable

MICROS = 1_000_000
# Event times: 1970 up to 2100. A clock outside is corrupt or hostile (and past ±2**63 µs
# no Avro long could hold it).
LATEST_US = 4_102_444_800 * MICROS  # 2100-01-01T00:00:00Z
MAX_CHIPS = 2**31 - 1  # the contract's `chips` is an Avro int
# The most chips one job or one fleet level may plausibly hold, as the pipeline's clean rows bound them
# (telemetry/columnar.py, MAX_CHIPS): past the largest fleets by two orders of magnitude.
PLAUSIBLE_CHIPS = 2**20


def progress(iterable, description: str, total: int | None = None, unit: str = "rec"):
    """A progress bar on stderr; silent when stderr is not a terminal (tests, pipes)."""
    # tqdm redraws its bar with carriage returns, which console's escaping stream would show as \x0d.
    from tqdm import tqdm  # here, not at the top: `mpg --help` lists `mpg import` without it

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
