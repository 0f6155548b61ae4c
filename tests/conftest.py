import sys
from pathlib import Path

# Test helpers (worked_example.py, …) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    """Files marked `slow` first. pytest-xdist (`--dist loadfile --no-loadscope-reorder`) hands whole files to
    the workers in this order, so the long files start at once and the many short ones even out the ends."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
