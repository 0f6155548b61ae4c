"""The exit codes of the `mpg` commands, for cron, systemd and scripts to tell apart.

EX_TEMPFAIL (75, from sysexits.h) means "busy, retry later": another process
holds the output (`mpg run`, `mpg stream`, `mpg demo`) or the period
(`mpg validate`, `mpg report`), so the same command run again later is
right. deploy/mpg-report.service retries on it (RestartForceExitStatus=75).

DAMAGED (3) means the output store is damaged (a commit, a data file or a
saved state missing or unreadable): the same command again will not help;
`mpg check --output OUT` says what is wrong and what `--repair` can do.
"""

from __future__ import annotations

OK, FAILED, USAGE, DAMAGED, BUSY = 0, 1, 2, 3, 75


DAMAGED_MEANING = "the output store is damaged: `mpg check --output OUT` says what is wrong and how to recover"


def describe(failed: str | None = None, busy: str | None = None, damaged: str | None = None) -> str:
    """The exit codes of a command, for its --help epilog: `failed` says what 1 means, `damaged` what 3
    means (DAMAGED_MEANING for a command that opens a store), `busy` what 75 means."""
    codes = [f"{OK} done"]
    if failed:
        codes.append(f"{FAILED} {failed}")
    codes.append(f"{USAGE} bad arguments, settings or input")
    if damaged:
        codes.append(f"{DAMAGED} {damaged}")
    if busy:
        codes.append(f"{BUSY} (EX_TEMPFAIL) {busy}: retry later")
    return "exit codes:\n" + "\n".join(f"  {code}" for code in codes) + "\n"
