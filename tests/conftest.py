import contextlib
import logging
import sys
from pathlib import Path

import pytest

# Test helpers (worked_example.py, …) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent))


# Files whose tests wait for a recording made in a process of its own, started with the session
# (tests/slurm_recording.py): they run last, so the other files use the cores while it records.
RUN_LAST = {"test_slurm.py"}


def pytest_collection_modifyitems(config, items):
    """Files marked `slow` first, RUN_LAST's at the end. pytest-xdist (`--dist loadfile --no-loadscope-reorder`)
    hands whole files to the workers in this order, so the long files start at once and the many short ones
    even out the ends."""
    items.sort(key=lambda item: (item.path.name in RUN_LAST, item.get_closest_marker("slow") is None))


@pytest.fixture(autouse=True, scope="session")
def _slurm_recording_started(request, tmp_path_factory):
    """A real Slurm records its scenarios from the session's first test on, when tests/importers/test_slurm.py is selected."""
    if any(item.path.name == "test_slurm.py" for item in request.session.items):
        import slurm_recording

        slurm_recording.start(slurm_recording.session_folder(tmp_path_factory))


@contextlib.contextmanager
def _console_kept():
    """`mpg -q …` and `mpg -vv …` set how loud the process is: a test after them in the same worker,
    calling a command's function without `main`, must not inherit it."""
    from fleet_goodput import console

    root = logging.getLogger()
    level, verbosity = root.level, console.verbosity()
    yield
    console.configure(verbosity)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _console_as_it_was():
    with _console_kept():
        yield


@pytest.fixture(autouse=True, scope="module")
def _console_as_it_was_for_the_module():
    """The same around a file's module fixtures (a module fixture calling `mpg -q run` made the next
    file on its worker quiet)."""
    with _console_kept():
        yield


@pytest.fixture(scope="session")
def worked_example_run(tmp_path_factory) -> tuple[Path, Path]:
    """The worked example's telemetry (docs/metric.md section 4) and `mpg run`'s output over it, once per test worker.

    Several files need exactly this output: each works on its own copy (`shutil.copytree`), so the pipeline
    runs once per worker instead of once per file."""
    import worked_example
    from fleet_goodput.cli import main
    from fleet_goodput.telemetry.avro_io import write_events

    root = tmp_path_factory.mktemp("worked_example")
    for stream, records in worked_example.records().items():
        write_events(root / "in" / stream / "part-0.avro", stream, records)
    assert main(["run", "--input", str(root / "in"), "--output", str(root / "out")]) == 0
    return root / "in", root / "out"
