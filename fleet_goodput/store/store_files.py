"""The files of an output store, on local disk or object storage, through one pyarrow file system.

The store's own checks read its files beside what delta-rs reads: the marker
that says a folder is a store (delta_store.py), the commits of each Delta log
and the size of each data file (store_check.py, `mpg check`), and move a torn
commit aside (--repair). They go through `StoreFiles`, so a store on gs://
has them as a local one does, by the same code: a local folder is read with
pyarrow's LocalFileSystem, a `gs://bucket/…` store with its GcsFileSystem (the
default Google credentials, as delta-rs uses). A `file://` URI is a local
folder here, but the store takes it down every path a gs:// store takes (no
lock file, no maintenance): the tests' stand-in for gs://.

Paths are relative to the store's root, with `/` between parts.
"""

from __future__ import annotations

import os
from urllib.parse import unquote

import pyarrow.fs as pafs


def _file_system(root: str) -> tuple[pafs.FileSystem, str]:
    """The file system a store's `root` is on, and the root's path in it."""
    if "://" not in root:
        return pafs.LocalFileSystem(), root.rstrip("/")
    scheme, rest = root.split("://", 1)
    if scheme == "file":
        return pafs.LocalFileSystem(), unquote(rest).rstrip("/")
    # From the bucket alone: pyarrow parses the whole as a URI, which a folder named with a space is not.
    bucket, _, folder = rest.partition("/")
    file_system, bucket_path = pafs.FileSystem.from_uri(f"{scheme}://{bucket}")
    return file_system, f"{bucket_path.rstrip('/')}/{folder}".rstrip("/")


class StoreFiles:
    """The files under a store's root (a local folder, `gs://…` or `file://…`)."""

    def __init__(self, root: str):
        self.file_system, self.base = _file_system(str(root))
        self.object_storage = not isinstance(self.file_system, pafs.LocalFileSystem)

    def path(self, relative: str = "") -> str:
        """The path of `relative` in the file system (not a URI)."""
        return f"{self.base}/{relative}" if relative else self.base

    def _info(self, relative: str) -> pafs.FileInfo:
        return self.file_system.get_file_info(self.path(relative))

    def is_dir(self, relative: str = "") -> bool:
        """A folder, or, on object storage, a prefix that holds objects."""
        info = self._info(relative)
        if info.type == pafs.FileType.Directory:
            return True
        return self.object_storage and info.type == pafs.FileType.NotFound and bool(self.names(relative))

    def is_file(self, relative: str) -> bool:
        return self._info(relative).type == pafs.FileType.File

    def exists(self, relative: str = "") -> bool:
        return self._info(relative).type != pafs.FileType.NotFound or self.is_dir(relative)

    def size(self, relative: str) -> int | None:
        """A file's size in bytes; None when there is no such file."""
        info = self._info(relative)
        return info.size if info.type == pafs.FileType.File else None

    def names(self, relative: str = "") -> list[str]:
        """The names of what a folder holds directly (files and folders); none when there is no folder."""
        selector = pafs.FileSelector(self.path(relative), allow_not_found=True, recursive=False)
        try:
            return sorted(info.base_name for info in self.file_system.get_file_info(selector))
        except NotADirectoryError:
            return []

    def read_bytes(self, relative: str) -> bytes:
        with self.file_system.open_input_stream(self.path(relative)) as handle:
            return handle.read()

    def read_text(self, relative: str) -> str:
        return self.read_bytes(relative).decode()

    def open(self, relative: str):
        """A file to read at random (a Parquet footer)."""
        return self.file_system.open_input_file(self.path(relative))

    def write_whole(self, relative: str, data: bytes) -> None:
        """Write a file whole or not at all: an object is written in one request; a local file is written
        beside, as `<name>.tmp`, and renamed into place."""
        if self.object_storage:
            with self.file_system.open_output_stream(self.path(relative)) as out:
                out.write(data)
            return
        tmp = f"{self.path(relative)}.tmp"
        self.file_system.create_dir(tmp.rsplit("/", 1)[0], recursive=True)
        try:
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, self.path(relative))
        finally:  # on a full disk, say: give the space back
            if os.path.exists(tmp):
                os.unlink(tmp)

    def move(self, relative: str, to: str) -> None:
        """Move a file to `to` (its folders made): a copy then a delete, which every object store can do."""
        self.file_system.create_dir(self.path(to).rsplit("/", 1)[0], recursive=True)
        self.file_system.copy_file(self.path(relative), self.path(to))
        self.file_system.delete_file(self.path(relative))
