"""How loud the `mpg` commands are: --verbose shows Beam's and Dataflow's logs, --quiet only problems.

By default Beam logs only errors: its warnings are about itself, not about
the user's data. `mpg run`, `stream`, `simulate` and `replay` print their
progress and summaries with `say`, which --quiet silences; errors, warnings
and a submitted Dataflow job's id always print, and so do the answers of
`mpg sql` and `mpg runs`.
"""

from __future__ import annotations

import logging
import sys

_quiet = False


def configure(verbosity: int) -> None:
    """-1 quiet, 0 default, 1 verbose (INFO logs: Beam's stages, Dataflow's job messages)."""
    global _quiet
    _quiet = verbosity < 0
    logging.basicConfig()
    logging.getLogger().setLevel(logging.INFO if verbosity > 0 else logging.ERROR)


def say(*parts, file=None, **kwargs) -> None:
    """Print a progress or summary line, unless --quiet."""
    if not _quiet:
        print(*parts, file=file or sys.stdout, **kwargs)
