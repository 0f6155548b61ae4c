"""The columnar fast path returns exactly what the per-record reference path returns.

`decode_file_fast` must be indistinguishable from `decode_file`: the same
batches per key in the same order, with event tuples equal in value and in
type, the same rejected rows, read count and latest time, also for a chunk
of event time. Checked on the simulator's files (where the fast path must actually be taken, or the
comparison would prove nothing) and on crafted files: bad rows of every
kind next to good ones, a truncated file, a foreign schema, an older writer
schema, other codecs and an empty file.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import fastavro
import pytest

from fleet_goodput import schemas
from fleet_goodput.core.asof import CLOCK_STREAM, kept_times
from fleet_goodput.core.config import load_settings
from fleet_goodput.simulator import simulate
from fleet_goodput.telemetry.avro_io import write_events
from fleet_goodput.telemetry.columnar import _clean_columns, decode_file_fast
from fleet_goodput.telemetry import observed
from fleet_goodput.telemetry.decode import TimeSlice, clock_horizon_us, clock_periods, decode_file

ACCELERATORS = load_settings(None).accelerators
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00Z


def _typed(value):
    """`value` with the type of every leaf beside it, so 1 and 1.0 (or True) differ."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_typed(item) for item in value]
    if isinstance(value, dict):
        return "dict", [(key, _typed(item)) for key, item in value.items()]
    if isinstance(value, float) and math.isnan(value):
        return "float", "nan"
    return type(value).__name__, value


def _assert_same_as_reference(stream: str, data: bytes, source: str = "file.avro") -> None:
    reference = decode_file(stream, source, io.BytesIO(data), ACCELERATORS)
    fast = decode_file_fast(stream, source, io.BytesIO(data), ACCELERATORS)
    assert _typed(dict(fast.batches)) == _typed(dict(reference.batches))
    assert _typed(fast.rejected) == _typed(reference.rejected)
    assert fast.read == reference.read
    assert fast.kept_times == reference.kept_times
    # A backfill's chunk of event time builds only its events, and its kept times are theirs; the
    # records read are the file's. Cut at the middle event, so each side of the cut holds some.
    times = sorted(event[0] for batch in reference.batches.values() for event in batch)
    middle = times[len(times) // 2] if times else T0
    for times_of in (TimeSlice(since_us=middle), TimeSlice(until_us=middle, first=False)):
        kept = decode_file_fast(stream, source, io.BytesIO(data), ACCELERATORS, during=times_of)
        expected = {
            key: [event for event in batch if times_of.holds(event[0])] for key, batch in reference.batches.items()
        }
        # The same batches per key (the order of the keys may differ: a job's first event may be outside).
        assert _typed(sorted(kept.batches.items())) == _typed(sorted((k, v) for k, v in expected.items() if v))
        assert kept.read == reference.read
        # Only a scheduler file's events set the clock (fleet_goodput/core/asof.py): another's give no times.
        # A stated file's slice states its periods up to the slice's end (fleet_goodput/telemetry/observed.py).
        assert kept.kept_times == (
            kept_times(
                (event[0], key) for key, batch in expected.items() for event in batch if event[0] <= clock_horizon_us()
            )
            + clock_periods(observed.sliced(reference.observed, times_of.since_us, times_of.until_us))
            if stream == CLOCK_STREAM
            else []
        )


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    simulate(root, seed=5, hours=2)
    return root


@pytest.mark.parametrize("stream", schemas.STREAMS)
def test_simulated_files_decode_as_the_reference_does(simulated, stream):
    paths = sorted((simulated / stream).glob("*.avro"))
    assert paths
    for path in paths:
        data = path.read_bytes()
        _assert_same_as_reference(stream, data, str(path))
        if stream != "scheduler":
            assert _clean_columns(stream, data) is not None, f"{path} should take the fast path"


def _runtime(n: int, **fields) -> dict:
    return {
        "event_id": f"r{n}",
        "event_time": T0 + n * 1_000_000,
        "job_id": "job-1",
        "type": "STEP_START",
        "step": n,
        "attempt": None,
        **fields,
    }


def _profile(n: int, **fields) -> dict:
    return {
        "event_id": f"p{n}",
        "event_time": T0 + n * 1_000_000,
        "job_id": "job-1",
        "step": n,
        "duration_s": 0.5,
        "chips": 8,
        "ideal_flops": 1e15,
        "flops_source": "ANALYTIC",
        "bytes_accessed": None,
        **fields,
    }


def _file(stream: str, records: list[dict], codec: str = "deflate", schema: dict | None = None) -> bytes:
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema or schemas.load(stream), records, codec=codec, sync_interval=256)
    return buffer.getvalue()


BAD_RUNTIME_ROWS = {
    "empty event_id": {"event_id": ""},
    "empty job_id": {"job_id": ""},
    "event time before 2000": {"event_time": 0},
    "event time far in the future": {"event_time": T0 + 100 * 365 * 86_400_000_000},
    "negative step": {"step": -1},
    "huge step": {"step": 2**62},
    "job id like a capacity key": {"job_id": "capacity|c1|h100"},
    "control character in an id": {"event_id": "r\x00x"},
    "newline in a job id": {"job_id": "job\n1"},
    "non-ASCII id": {"job_id": "jöb-1"},
    "very long id": {"event_id": "r" * 5000},
    "space in an id": {"job_id": "job 1"},
}


def test_a_repeated_event_id_sends_its_file_to_the_reference():
    records = [_runtime(n) for n in range(10)]
    records[4] = _runtime(4, event_id="r2", step=99)
    data = _file("runtime", records)
    assert _clean_columns("runtime", data) is None
    _assert_same_as_reference("runtime", data)


@pytest.mark.parametrize("name", BAD_RUNTIME_ROWS)
def test_a_doubtful_runtime_row_sends_its_file_to_the_reference(name):
    records = [_runtime(n) for n in range(20)]
    records[7] = _runtime(7, **BAD_RUNTIME_ROWS[name])
    data = _file("runtime", records)
    assert _clean_columns("runtime", data) is None
    _assert_same_as_reference("runtime", data)


BAD_PROFILER_ROWS = {
    "zero chips": {"chips": 0},
    "a million chips": {"chips": 2**21},
    "NaN duration": {"duration_s": float("nan")},
    "infinite ideal FLOPs": {"ideal_flops": float("inf")},
    "negative ideal FLOPs": {"ideal_flops": -1.0},
    "zero duration": {"duration_s": 0.0},
    "absurd ideal FLOPs": {"ideal_flops": 1e40},
    "negative step": {"step": -3},
    "empty job_id": {"job_id": ""},
}


@pytest.mark.parametrize("name", BAD_PROFILER_ROWS)
def test_a_doubtful_profiler_row_sends_its_file_to_the_reference(name):
    records = [_profile(n) for n in range(10)]
    records[3] = _profile(3, **BAD_PROFILER_ROWS[name])
    data = _file("profiler", records)
    assert _clean_columns("profiler", data) is None
    _assert_same_as_reference("profiler", data)


def test_clean_rows_of_every_shape_take_the_fast_path():
    codes = (
        "INIT_START",
        "INIT_END",
        "COMPILE_START",
        "COMPILE_END",
        "STEP_START",
        "STEP_END",
        "CHECKPOINT_SAVE_START",
        "CHECKPOINT_SAVE_END",
        "CHECKPOINT_RESTORE_START",
        "CHECKPOINT_RESTORE_END",
        "DATA_WAIT_START",
        "DATA_WAIT_END",
    )
    records = [
        _runtime(n, type=code, job_id=f"job-{n % 3}", step=None if n % 2 else n) for n, code in enumerate(codes * 3)
    ]
    data = _file("runtime", records)
    assert _clean_columns("runtime", data) is not None
    _assert_same_as_reference("runtime", data)


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_codecs(codec):
    data = _file("runtime", [_runtime(n) for n in range(50)], codec=codec)
    _assert_same_as_reference("runtime", data)


def test_truncated_file():
    data = _file("runtime", [_runtime(n) for n in range(200)], codec="null")
    cut = data[: len(data) - 40]
    assert _clean_columns("runtime", cut) is None
    _assert_same_as_reference("runtime", cut)


@pytest.mark.parametrize("tail", [b"\x00", b"\x00" * 16, b"\x02\x00" + b"\x00" * 16, b"garbage!"])
def test_bytes_after_the_last_block(tail):
    """polars reads past some of these; the reference reports them, so the fast path must not take them."""
    data = _file("profiler", [_profile(n) for n in range(30)]) + tail
    assert _clean_columns("profiler", data) is None
    _assert_same_as_reference("profiler", data)


def test_every_truncation_and_inserted_byte():
    """Cut the file at every 5th byte, or insert a byte there: the two paths agree on what is left."""
    data = _file("runtime", [_runtime(n, job_id=f"job-{n % 3}") for n in range(40)], codec="null")
    for position in range(0, len(data), 5):
        _assert_same_as_reference("runtime", data[:position])
        _assert_same_as_reference("runtime", data[:position] + b"\x07" + data[position:])


def test_foreign_schema():
    foreign = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "long"}]}
    data = _file("runtime", [{"x": 1}, {"x": 2}], schema=foreign)
    assert _clean_columns("runtime", data) is None
    _assert_same_as_reference("runtime", data)


def test_an_older_writer_schema_is_resolved_by_the_reference():
    """A file written before `attempt` existed reads through Avro schema resolution, which only the reference does."""
    older = schemas.schema_json("runtime")
    older = {**older, "fields": [field for field in older["fields"] if field["name"] != "attempt"]}
    records = [{key: value for key, value in _runtime(n).items() if key != "attempt"} for n in range(10)]
    data = _file("runtime", records, schema=fastavro.parse_schema(older, named_schemas={}))
    assert _clean_columns("runtime", data) is None
    _assert_same_as_reference("runtime", data)


def test_a_writer_schema_worded_differently_takes_the_fast_path():
    """Docs are no part of the bytes: a writer whose copy of the contract words them differently
    (an older copy of this project's schemas, say) is read by the fast path all the same."""
    reworded = schemas.schema_json("profiler")
    reworded = {
        **reworded,
        "doc": "a writer's own wording",
        "fields": [{**field, "doc": f"about {field['name']}"} for field in reworded["fields"]],
    }
    data = _file("profiler", [_profile(n) for n in range(10)], schema=fastavro.parse_schema(reworded, named_schemas={}))
    assert _clean_columns("profiler", data) is not None
    _assert_same_as_reference("profiler", data)


def test_empty_file_and_garbage():
    _assert_same_as_reference("runtime", _file("runtime", []))
    _assert_same_as_reference("profiler", b"not an avro file at all")


def test_written_by_the_project_writer(tmp_path):
    path = tmp_path / "part-0.avro"
    write_events(path, "profiler", [_profile(n) for n in range(30)])
    assert _clean_columns("profiler", path.read_bytes()) is not None
    _assert_same_as_reference("profiler", path.read_bytes())
