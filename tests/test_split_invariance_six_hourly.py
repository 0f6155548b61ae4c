"""Split invariance, cut every 6 hours (tests/test_split_invariance.py explains the property).

In a file of its own so that the test runner gives it a core of its own.
"""

from __future__ import annotations

import pytest

from test_split_invariance import check_consecutive_runs, fleet  # noqa: F401 - the fixture, built here again

pytestmark = pytest.mark.slow


def test_runs_every_six_hours_equal_one_run_over_everything(fleet):  # noqa: F811
    check_consecutive_runs(fleet, "six_hourly")
