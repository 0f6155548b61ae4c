"""Data-quality validation of an output folder with Great Expectations.

    mpg validate --output OUT [--date D | --from D --to D]

suites.py holds the expectations (one suite per table, the manifest and the
views, each with its severity and the reason for its threshold), batches.py
the frames they run on, run.py the GX project, Data Docs and summary,
period.py the period and its lock, and checked_run.py the one run they read,
from one Store checked whole once.
"""

import os

# GX sends usage statistics unless told not to; validation must work offline
# and say nothing about the fleet to anyone.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
