"""The helpers the importer tests share: where the samples are, an import into a folder, and a batch run
over it read back through the views. Every importer's own promises are tests/importers/test_importers_common.py's."""

from __future__ import annotations

import json
from pathlib import Path

from fleet_goodput.core.config import Settings, load_settings, part_names, peak_table
from fleet_goodput.importers import IMPORTERS
from fleet_goodput.importers.common import Options
from fleet_goodput.importers.import_folder import write_import
from fleet_goodput.runs.batch import run_batch
from fleet_goodput.store.views import connect

FIXTURES = Path(__file__).parent / "data"
# The real public samples, each with its licence and source (tests/data/public/README.md).
PUBLIC_DATA = FIXTURES / "public"
SETTINGS = load_settings()


def options(**overrides) -> Options:
    return Options(
        **{
            "accelerators": frozenset(SETTINGS.accelerators),
            "part_names": part_names(SETTINGS.accelerators),
            "peaks": tuple(sorted(peak_table(SETTINGS.accelerators).items())),
            **overrides,
        }
    )


def import_to(name: str, source: Path, out: Path, **overrides):
    """Import `source` with importer `name` into `out`; returns (Imported, summary)."""
    imported = IMPORTERS[name].read(source, options(**overrides))
    return imported, write_import(imported, out)


def run_and_read(input_dir: Path, output_dir: Path, settings: Settings = SETTINGS) -> tuple[dict, dict[str, dict]]:
    """Run the batch pipeline; returns (manifest, job_goodput rows by job_id)."""
    outcome = run_batch(str(input_dir), str(output_dir), settings, build_views=False)  # read through connect()
    with connect(output_dir) as connection:
        cursor = connection.execute("select * from job_goodput")
        columns = [d[0] for d in cursor.description]
        rows = {row[columns.index("job_id")]: dict(zip(columns, row)) for row in cursor.fetchall()}
    return outcome.manifest, rows


def by_job(imported, stream: str, job_id: str) -> list[dict]:
    return sorted(
        (r for r in imported.streams[stream] if r["job_id"] == job_id), key=lambda r: (r["event_time"], r["event_id"])
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def rejected_rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "import_rejected.jsonl").read_text().splitlines()]
