import sys
from pathlib import Path

import pytest

# Test helpers (worked_example.py, …) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    """Files marked `slow` first. pytest-xdist (`--dist loadfile --no-loadscope-reorder`) hands whole files to
    the workers in this order, so the long files start at once and the many short ones even out the ends."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def worked_example_run(tmp_path_factory) -> tuple[Path, Path]:
    """The worked example's telemetry (MPG.md section 4) and `mpg run`'s output over it, once per test worker.

    Several files need exactly this output: each works on its own copy (`shutil.copytree`), so the pipeline
    runs once per worker instead of once per file."""
    import worked_example
    from fleet_goodput.avro_io import write_events
    from fleet_goodput.cli import main

    root = tmp_path_factory.mktemp("worked_example")
    for stream, records in worked_example.records().items():
        write_events(root / "in" / stream / "part-0.avro", stream, records)
    assert main(["run", "--input", str(root / "in"), "--output", str(root / "out")]) == 0
    return root / "in", root / "out"
