"""One batch run end to end: the Beam pipeline, the manifest, the DuckDB views.

Used by `mpg run` and `mpg demo`; raises `ReconciliationError` (after writing
the manifest, so the failure can be inspected) when counts do not add up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput.config import Settings
from fleet_goodput.manifest import MANIFEST_FILE, write_manifest
from fleet_goodput.views import build_database
from pipelines import goodput


class ReconciliationError(RuntimeError):
    """read != accepted + duplicate + rejected for some stream."""


class InputError(ValueError):
    """The input folder is missing or holds no telemetry."""


@dataclass(frozen=True)
class BatchOutcome:
    manifest: dict
    database: Path
    seconds: float


def check_input(input_dir: str) -> None:
    if "://" in input_dir:
        return  # remote inputs are matched by Beam's file IO
    root = Path(input_dir)
    if not root.is_dir():
        raise InputError(f"input folder {input_dir} does not exist")
    if not any(root.glob("*/*.avro")):
        raise InputError(f"no telemetry in {input_dir}: expected {input_dir}/scheduler/*.avro, "
                         f"{input_dir}/runtime/*.avro and {input_dir}/profiler/*.avro (try `mpg simulate --out {input_dir}`)")


def run_batch(input_dir: str, output_dir: str, settings: Settings, as_of_us: int | None = None,
              beam_args: list[str] | None = None) -> BatchOutcome:
    check_input(input_dir)
    started = time.monotonic()
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    result = goodput.run(input_dir, output_dir, settings, as_of_us, beam_args)
    manifest = write_manifest(output_dir, input_dir=input_dir, as_of_us=result.as_of_us,
                              window_s=settings.window_s, counts=result.counts,
                              extra={"output": str(output_dir)})
    if not manifest["reconciles"]:
        broken = [f"{name}: read {c['read']} != accepted {c['accepted']} + duplicate {c['duplicate']} + rejected {c['rejected']}"
                  for name, c in manifest["streams"].items() if not c["reconciles"]]
        raise ReconciliationError(f"counts do not reconcile ({'; '.join(broken)}); see {Path(output_dir) / MANIFEST_FILE}")
    database = build_database(output_dir, settings)
    return BatchOutcome(manifest=manifest, database=database, seconds=time.monotonic() - started)
