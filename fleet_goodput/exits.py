"""The exit codes of the `mpg` commands, for cron, systemd and scripts to tell apart.

EX_TEMPFAIL (75, from sysexits.h) means "busy, retry later": another process
holds the output (`mpg run`, `mpg stream`, `mpg demo`) or the period
(`mpg validate`, `mpg report`), so the same command run again later is
right. deploy/mpg-daily.service retries on it (RestartForceExitStatus=75).

Every command ends a fault of the machine rather than of the data with a code
of its own (fleet_goodput/faults.py), the store left as its last committed run
left it: 73 (EX_CANTCREAT) an output that cannot be written (a read-only file
system, permission denied), 74 (EX_IOERR) no space left on a device, 77
(EX_NOPERM) an input that cannot be read (permission denied), and 128 + the
signal for a command stopped by one, as shells report it: 130 for Ctrl-C
(SIGINT), 143 for SIGTERM (systemd stopping it, a scheduler's timeout).

DAMAGED (3) means the output store is damaged (a commit, a data file or a
saved state missing or unreadable): the same command again will not help;
`mpg check --output OUT` says what is wrong and what `--repair` can do.
"""

from __future__ import annotations

import signal

OK, FAILED, USAGE, DAMAGED, BUSY = 0, 1, 2, 3, 75
CANNOT_WRITE, NO_SPACE, NO_PERMISSION = 73, 74, 77
INTERRUPTED, TERMINATED = 128 + signal.SIGINT, 128 + signal.SIGTERM
BROKEN_PIPE = 128 + signal.SIGPIPE  # the reader of the output went away (`mpg sql … | head`)

DAMAGED_MEANING = "the output store is damaged: `mpg check --output OUT` says what is wrong and how to recover"

_FAULTS = [
    (CANNOT_WRITE, "(EX_CANTCREAT) the output cannot be written: its file system is read-only, or permission denied"),
    (NO_SPACE, "(EX_IOERR) no space left on a device (or a disk quota reached): free some, then run again"),
    (NO_PERMISSION, "(EX_NOPERM) an input cannot be read: permission denied"),
    (INTERRUPTED, "interrupted (Ctrl-C, SIGINT)"),
    (TERMINATED, "stopped by SIGTERM (systemd stopping it, a scheduler's timeout)"),
]


def describe(failed: str | None = None, busy: str | None = None, damaged: str | None = None) -> str:
    """The exit codes of a command, for its --help epilog: `failed` says what 1 means, `damaged` what 3
    means (DAMAGED_MEANING for a command that opens a store), `busy` what 75 means. The faults' codes
    (73, 74, 77, 130, 143) are every command's."""
    codes = [(OK, "done"), (USAGE, "bad arguments, settings or input"), *_FAULTS]
    if failed:
        codes.append((FAILED, failed))
    if damaged:
        codes.append((DAMAGED, damaged))
    if busy:
        codes.append((BUSY, f"(EX_TEMPFAIL) {busy}: retry later"))
    return (
        "exit codes:\n"
        + "".join(f"  {code} {meaning}\n" for code, meaning in sorted(codes))
        + "  (on 73, 74, 77, 130 and 143 nothing committed or published is lost: the error's one line says what "
        "stands)\n"
    )
