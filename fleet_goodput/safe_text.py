"""Text from the telemetry made safe to show: control characters are shown, never obeyed.

A team, a framework, an event id or a file name can carry terminal control
sequences: ESC[2J clears the screen, an OSC 8 sequence (ESC ] 8 ; ; URL BEL)
hides a link behind innocent text, BEL rings, the one-byte C1 CSI (U+009B)
starts a sequence on its own, a carriage return overwrites what a line said.
Every output of `mpg` (terminal, CSV, HTML) writes such characters visibly
as `\\xNN`, their code in two hex digits: ESC shows as `\\x1b`, CSI as `\\x9b`,
DEL as `\\x7f`, a tab as `\\x09`. Escaping the character that starts a sequence
is enough to defuse the whole sequence: what follows it is printable text.

Escaped are C0 (U+0000..U+001F), DEL (U+007F) and C1 (U+0080..U+009F); a
newline stays where the output can hold one (a CSV cell, a page's text).
So are the bidirectional-text controls ("Trojan Source", CVE-2021-42574):
the embeddings and overrides U+202A..U+202E, the isolates U+2066..U+2069 and
the marks U+200E, U+200F and U+061C, which reorder what a line shows (an
override makes `gpu-team` read backwards, or a job id look like another's)
and show as `\u202e`.
So are lone surrogates: Python reads a file name's bytes that are not UTF-8
as U+DC80..U+DCFF, which show as the byte they stand for (`\\x9b` again),
and which a UTF-8 stream could not write at all.
The form is for people to read: a value that spells `\\x1b` itself looks the
same, so `mpg sql --format json` (JSON's own escapes) or `--csv-raw` give the
exact value.

Spreadsheet formulas (OWASP "CSV Injection"): a CSV cell that starts with
= + - @, a tab or a carriage return would run as a formula, so it is written
with a leading single quote (`spreadsheet_safe`); the report's CSVs and
`mpg sql --format csv` both use `csv_cell`.
"""

from __future__ import annotations

import json
import re

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
_CONTROL_OR_NEWLINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _shown(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of a file name (surrogateescape)
        code -= 0xDC00
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, keep_newlines: bool = False) -> str:
    """`text` with every control character written as `\\xNN` (newlines kept if asked)."""
    return (_CONTROL if keep_newlines else _CONTROL_OR_NEWLINE).sub(_shown, text)


def spreadsheet_safe(value):
    """A cell value a spreadsheet shows as text, never runs: text starting like a formula gets a leading quote."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def csv_cell(value):
    """A CSV cell that neither a terminal nor a spreadsheet obeys: control characters shown
    (newlines kept: CSV quotes them), then the formula guard. Numbers stay numbers."""
    return spreadsheet_safe(printable(value, keep_newlines=True)) if isinstance(value, str) else value


def json_text(value, **dumps_options) -> str:
    """JSON text with no raw control character: json.dumps escapes C0 and (ASCII only) C1, but writes DEL as is,
    and the bidirectional controls too where it may write non-ASCII; those get JSON's own escapes."""
    return _JSON_RAW.sub(lambda match: f"\\u{ord(match.group()):04x}", json.dumps(value, **dumps_options))


_JSON_RAW = re.compile(f"[\x7f{_BIDI}]")
