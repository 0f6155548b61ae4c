"""Decoding files in helper processes changes nothing in the results.

A small simulated fleet is re-split into enough files per stream for the
read step to share them with a helper process (`--decode_workers=2`), with
a truncated file and a file with a bad row among them; every table and
every count must equal those of a run that decodes in one process.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import fastavro
import pytest

import schemas
from fleet_goodput.avro_io import write_events
from fleet_goodput.cli import main
from fleet_goodput.simulator import simulate
from transforms.read import PARALLEL_FROM_FILES

PARTS = PARALLEL_FROM_FILES + 2


@pytest.fixture(scope="module")
def many_files(tmp_path_factory) -> Path:
    simulated, root = tmp_path_factory.mktemp("simulated"), tmp_path_factory.mktemp("many_files")
    simulate(simulated, seed=3, hours=2)
    records = {stream: [record for path in sorted((simulated / stream).glob("*.avro"))
                        for record in fastavro.reader(path.open("rb"))] for stream in schemas.STREAMS}
    for stream in schemas.STREAMS:
        for part in range(PARTS):
            write_events(root / stream / f"part-{part:05d}.avro", stream, records[stream][part::PARTS])
    samples = records["profiler"]
    write_events(root / "profiler" / "part-bad.avro", "profiler", [*samples[:5], dict(samples[0], event_id="", step=-1)])
    data = (root / "runtime" / "part-00000.avro").read_bytes()
    (root / "runtime" / "part-truncated.avro").write_bytes(data[: len(data) // 2])
    return root


def _tables(output: Path) -> dict[str, list]:
    tables = {}
    for table in ("job_window", "jobs", "capacity_window", "rejected"):
        tables[table] = duckdb.sql(
            f"select * from read_parquet('{output}/tables/{table}/*/*.parquet', hive_partitioning = true) "
            "order by all").fetchall()
    return tables


@pytest.mark.slow
def test_helper_processes_give_the_same_results(many_files, tmp_path):
    outputs = {}
    for workers in (1, 2):
        output = tmp_path / f"workers-{workers}"
        assert main(["run", "--input", str(many_files), "--output", str(output), f"--decode_workers={workers}"]) == 0
        outputs[workers] = output
    assert _tables(outputs[2]) == _tables(outputs[1])
    counts = [json.loads((outputs[w] / "manifest.json").read_text())["streams"] for w in (1, 2)]
    assert counts[0] == counts[1]
    assert counts[0]["profiler"]["rejected"] >= 1 and counts[0]["runtime"]["rejected"] >= 1
