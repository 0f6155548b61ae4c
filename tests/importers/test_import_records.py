"""An import's records are held compactly and read back as the dicts they were (issue 37: importer memory).

fleet_goodput/importers/records.py keeps each record as a tuple of its values in the schema's field
order; importers and tests use a stream as a list of dicts. The memory it saves is measured by
benchmarks/bench_slurm_file.py (docs/slurm.md), not here.
"""

from __future__ import annotations

import fastavro
import pytest

from fleet_goodput.importers.common import Imported
from fleet_goodput.importers.import_folder import write_import
from fleet_goodput.importers.records import Records


def _runtime(number: int, time_us: int, step: int | None = None) -> dict:
    return {
        "event_id": f"j/r{number}",
        "event_time": time_us,
        "job_id": "j",
        "type": "STEP_START",
        "step": step,
        "attempt": None,
    }


def test_records_read_back_as_the_dicts_appended():
    records = Records("runtime")
    written = [_runtime(1, 20, 5), _runtime(2, 10)]
    for record in written:
        records.append(record)
    records += [_runtime(3, 30, 7)]
    assert len(records) == 3 and records
    assert list(records) == records[:] == [*written, _runtime(3, 30, 7)]
    assert records == [*written, _runtime(3, 30, 7)]
    assert records[1] == _runtime(2, 10) and records[-1]["step"] == 7
    del records[1:]
    assert list(records) == [_runtime(1, 20, 5)]


def test_a_missing_field_reads_as_null_and_an_unknown_one_is_refused():
    records = Records("runtime")
    records.append({"event_id": "j/r1", "event_time": 1, "job_id": "j", "type": "INIT_START"})
    assert records[0]["step"] is None and records[0]["attempt"] is None
    with pytest.raises(KeyError, match="no field chips"):
        records.append({**_runtime(2, 2), "chips": 8})
    assert len(records) == 1  # nothing half-added


def test_a_dict_read_back_is_a_copy():
    records = Records("runtime", [_runtime(1, 10, 1)])
    records[0]["step"] = 99
    assert records[0]["step"] == 1


def test_an_import_writes_its_records_sorted_by_time_then_id(tmp_path):
    imported = Imported("test")
    for number, time_us in ((3, 30), (1, 10), (2, 10)):
        imported.streams["runtime"].append(_runtime(number, time_us, number))
    write_import(imported, tmp_path / "out")
    with open(tmp_path / "out" / "runtime" / "part-00000.avro", "rb") as handle:
        read = [(record["event_id"], record["step"]) for record in fastavro.reader(handle)]
    assert read == [("j/r1", 1), ("j/r2", 2), ("j/r3", 3)]
