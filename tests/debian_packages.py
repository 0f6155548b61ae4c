"""Installing Debian's packages for the tests that run real servers (tests/slurm_box.py, tests/prometheus_box.py).

`ensure_installed(what, packages, missing_binaries)` installs them when some binary is missing:
`apt_install(packages)` runs apt-get as root with a policy-rc.d that exits 101 in place, so the
packages' install scripts do not start their system services (the tests start their own, as child
processes); the policy-rc.d that was there before, if any, is put back. It returns why it could not
install them, or None.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

POLICY_RC = Path("/usr/sbin/policy-rc.d")


def apt_install(packages: tuple[str, ...], what: str) -> str | None:
    if os.geteuid() != 0:
        return f"{what} is not installed and this is not root to apt-get it"
    if shutil.which("apt-get") is None:
        return f"{what} is not installed and there is no apt-get to install it"
    kept = POLICY_RC.read_bytes() if POLICY_RC.exists() else None
    try:
        POLICY_RC.write_text("#!/bin/sh\n# no service starts while packages install\nexit 101\n")
        POLICY_RC.chmod(0o755)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        steps = (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
        )
        for step in steps:
            done = subprocess.run(step, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode:
                return f"{' '.join(step)} failed ({done.returncode}): {done.stderr.strip()[-400:]}"
    finally:
        if kept is None:
            POLICY_RC.unlink(missing_ok=True)
        else:
            POLICY_RC.write_bytes(kept)
    return None


def ensure_installed(what: str, packages: tuple[str, ...], missing_binaries: Callable[[], list[str]]) -> str | None:
    """None once no binary is missing, else why the packages cannot be installed."""
    if not missing_binaries():
        return None
    reason = apt_install(packages, f"{what} ({', '.join(missing_binaries())} missing)")
    if reason:
        return reason
    missing = missing_binaries()
    return f"installed, but still missing {', '.join(missing)}" if missing else None
