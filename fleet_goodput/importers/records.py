"""One stream's records of an import, held compactly until they are written.

An import holds every record it makes until `write_import` writes them sorted
(fleet_goodput/importers/import_folder.py), so its memory grows with the jobs of its
source. As a dict, a scheduler record cost about 1.3 KiB (a dict of twelve
keys and its values), 4 KiB a job of three events; `Records` keeps each as a
tuple of its values in the schema's field order, a fifth of that
(benchmarks/bench_slurm_file.py, docs/slurm.md). Importers and tests use it as
the list of dicts it was: append a dict, read dicts back (each made when read),
slice, delete a tail. A record is a value: changing a dict read back changes
nothing held.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fleet_goodput import schemas


class Records:
    def __init__(self, stream: str, records: Iterable[dict] = ()):
        self.stream = stream
        self.fields = tuple(field["name"] for field in schemas.load(stream)["fields"])
        self._known = frozenset(self.fields)
        self._rows: list[tuple] = []
        self.extend(records)

    def _row(self, record: dict) -> tuple:
        if not self._known.issuperset(record):
            unknown = sorted(set(record) - self._known)
            raise KeyError(
                f"a {self.stream} record has no field {', '.join(unknown)} (the schema's: {', '.join(self.fields)})"
            )
        return tuple(map(record.get, self.fields))

    def _record(self, row: tuple) -> dict:
        return dict(zip(self.fields, row))

    def append(self, record: dict) -> None:
        self._rows.append(self._row(record))

    def extend(self, records: Iterable[dict]) -> None:
        self._rows.extend(map(self._row, records))

    def __iadd__(self, records: Iterable[dict]) -> Records:
        self.extend(records)
        return self

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[dict]:
        return map(self._record, self._rows)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._record(row) for row in self._rows[index]]
        return self._record(self._rows[index])

    def __delitem__(self, index) -> None:
        del self._rows[index]

    def __eq__(self, other) -> bool:
        if isinstance(other, Records):
            return self.stream == other.stream and self._rows == other._rows
        return isinstance(other, list) and list(self) == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"Records({self.stream!r}, {len(self)} records)"

    def sorted_by(self, *names: str) -> list[tuple]:
        """The held rows (tuples in `fields` order), sorted by the fields `names`: what `write_import`
        writes, made dicts a part at a time (`as_records`)."""
        positions = [self.fields.index(name) for name in names]
        return sorted(self._rows, key=lambda row: tuple(row[position] for position in positions))

    def as_records(self, rows: Iterable[tuple]) -> Iterator[dict]:
        return map(self._record, rows)
