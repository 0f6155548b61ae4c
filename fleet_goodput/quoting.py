"""Paths, names and labels as data, never code: one place that quotes them for each reader.

A folder may be called anything a file system allows (`it's`, `fleet[1]`,
`100% #1`, `$(x)`, `ünï cødé`), and a size class any label. Pasted into SQL a
`'` ends the string; given to DuckDB's `read_parquet` or Beam's
`FileSystems.match` a `[1]`, `*` or `?` is a pattern that matches other files or
none; taken from a Delta file URI a `%20` is not a space. So:

- `sql_string` writes any text as a SQL string literal (DuckDB, and the
  predicates of delta-rs), for the statements that cannot take a parameter
  (`create view ... read_parquet([...])`, `attach`, `set`);
- `literal_pattern` writes a path as a glob pattern that matches that path
  alone, in the syntax DuckDB and Beam's file systems share (`[*]` for `*`);
- `path_of_uri` reads a path back from a Delta Lake file URI.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_GLOB_CHARACTERS = re.compile(r"([*?\[])")


def sql_string(text) -> str:
    """`text` as a SQL string literal: in single quotes, each `'` doubled."""
    return "'" + str(text).replace("'", "''") + "'"


def literal_pattern(path) -> str:
    """A glob pattern matching exactly `path`: each `*`, `?` and `[` inside a class of its own.

    DuckDB's globs and Beam's `FileSystem.translate_pattern` both read `[c]` as
    the character c, and neither has another way to quote one."""
    return _GLOB_CHARACTERS.sub(r"[\1]", str(path))


def path_of_uri(uri: str) -> str:
    """The path a Delta Lake file URI names: delta-rs percent-encodes it (a space as `%20`, `%` as `%25`)."""
    return unquote(uri.removeprefix("file://"))
