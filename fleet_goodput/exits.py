"""The exit codes of the `mpg` commands, for cron, systemd and scripts to tell apart.

EX_TEMPFAIL (75, from sysexits.h) means "busy, retry later": another process
holds the output (`mpg run`, `mpg stream`, `mpg demo`) or the period
(`mpg validate`, `mpg report`), so the same command run again later is
right. deploy/mpg-report.service retries on it (RestartForceExitStatus=75).
"""

from __future__ import annotations

OK, FAILED, USAGE, BUSY = 0, 1, 2, 75


def describe(failed: str | None = None, busy: str | None = None) -> str:
    """The exit codes of a command, for its --help epilog: `failed` says what 1 means, `busy` what 75 means."""
    codes = [f"{OK} done"]
    if failed:
        codes.append(f"{FAILED} {failed}")
    codes.append(f"{USAGE} bad arguments, settings or input")
    if busy:
        codes.append(f"{BUSY} (EX_TEMPFAIL) {busy}: retry later")
    return "exit codes:\n" + "\n".join(f"  {code}" for code in codes) + "\n"
