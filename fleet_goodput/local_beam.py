"""Importing Beam for a run computed on this machine, without the clients such a run never calls.

`import apache_beam` imports every connector Beam ships: BigQuery, Pub/Sub,
Cloud Storage and the Dataflow API's clients (google-cloud-*, apitools, auth
and crypto libraries) and MongoDB's (pymongo). A run that reads and writes
local folders on the in-process runner calls none of them, and importing
them cost such a run about 0.45 of the 1.6 CPU seconds its imports took
(docs/performance.md, the section on the edges of `mpg run`): 40% of what
the columnar floor spends on everything.

Beam imports each of them inside `try: ... except ImportError:` and goes on
without that connector, so `import_beam_for_local_run` imports Beam with
them marked absent in `sys.modules` (Python's own way to make an import
fail), then removes the marks: anything imported later loads as usual. Only
a run that is local in every part takes this path (`is_local_run`); a gs://
input or output, or another runner, imports Beam whole. (pandas, which Beam
imports for its DataFrame type hints, is not left out: pyarrow's datasets
import it anyway when the run commits.)
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager

# The runner of a run given no --runner: the default DirectRunner first tries to
# fetch the Prism runner, which hangs offline; the in-process FnApiRunner needs nothing.
DEFAULT_RUNNER = "FnApiRunner"
# Beam's local runners, by name without the "Runner" suffix, lower case.
LOCAL_RUNNERS = ("fnapi", "direct", "bundlebaseddirect", "switchingdirect")

# The modules whose failed import makes Beam skip a connector a local run does not use. Each is
# imported by Beam in a `try` that catches ImportError (tests/test_local_beam.py keeps that true).
UNUSED_BY_A_LOCAL_RUN = (
    "bson", "pymongo",  # apache_beam.io.mongodbio
    "apache_beam.io.gcp.bigquery",  # apache_beam.io skips its GCP connectors: BigQuery, Pub/Sub, GCS, cross-language
    "google.cloud.storage",  # apache_beam.io.filesystems: the gs:// file system
    "google.cloud.dataflow",  # apache_beam.runners.dataflow: the Dataflow API client
)
# Beam warns, when MongoDB's client is missing, that it is; here it is missing on purpose.
_QUIET_LOGGERS = ("apache_beam.io.mongodbio",)


def runner_is_local(runner: str) -> bool:
    """Whether a --runner value names one of Beam's runners that compute in this machine's processes."""
    return runner.lower().removesuffix("runner") in LOCAL_RUNNERS


def runner_flag(flags: list[str], default: str) -> str:
    """The --runner that `flags` (Beam pipeline flags) give, the last one winning as argparse does."""
    runner = default
    for index, flag in enumerate(flags):
        if flag.startswith("--runner="):
            runner = flag.partition("=")[2]
        elif flag == "--runner" and index + 1 < len(flags):
            runner = flags[index + 1]
    return runner


def is_local_run(flags: list[str], paths: list[str | None]) -> bool:
    """Whether a run with these Beam flags over these input and output paths computes and stores locally."""
    return runner_is_local(runner_flag(flags, DEFAULT_RUNNER)) and not any(
        path is not None and "://" in path for path in paths)


def import_beam_for_local_run(absent: tuple[str, ...] = UNUSED_BY_A_LOCAL_RUN) -> None:
    """Import Beam without the connectors a local run does not use, the modules `absent` (see the
    module's doc). Does nothing if Beam is already imported: it keeps whatever it imported then. A
    Beam that turns out to need one of them after all is imported again, whole."""
    if "apache_beam" in sys.modules:
        return
    try:
        with _marked_absent(absent):
            import apache_beam  # noqa: F401 - imported here so that later imports of it find it loaded
    except ImportError:
        for name in [name for name in sys.modules if name == "apache_beam" or name.startswith("apache_beam.")]:
            del sys.modules[name]
        import apache_beam  # noqa: F401


@contextmanager
def _marked_absent(names: tuple[str, ...]):
    """Imports of `names` fail inside the block (those not imported already), and Beam's warnings
    about them are not printed; afterwards they import as usual."""
    marked = [name for name in names if name not in sys.modules]
    quieted = [logger for logger in map(logging.getLogger, _QUIET_LOGGERS) if not logger.disabled]
    for name in marked:
        sys.modules[name] = None
    for logger in quieted:
        logger.disabled = True
    try:
        yield
    finally:
        for name in marked:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]
        for logger in quieted:
            logger.disabled = False
