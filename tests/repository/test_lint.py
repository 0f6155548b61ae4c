"""The code passes ruff's checks, with the rules pyproject.toml names ([tool.ruff.lint]), and is laid out as
`ruff format` lays it out: both run with the suite, so `.ci/run` runs them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("SKIPPED, NOT CHECKED: ruff is not installed (pip install -e '.[test]' installs it)")
    return subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing():
    done = _ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_code_is_laid_out_as_ruff_format_lays_it_out():
    done = _ruff("format", "--check", "--no-cache", ".")
    assert done.returncode == 0, "run `ruff format .`:\n" + done.stdout + done.stderr
