"""Slurm's own numbers, from the raw `sacct` and `sacctmgr` text alone (none of the project's code).

Used by tests/importers/test_slurm_import.py (on the recorded sample) and tests/importers/test_slurm.py (on a live box)
to check the pipeline's figures against an independent calculation.
"""

from __future__ import annotations

import re
from calendar import timegm
from pathlib import Path
from time import strptime


def utc_seconds(text: str) -> int:
    return timegm(strptime(text, "%Y-%m-%dT%H:%M:%S"))  # sacct ran with TZ=UTC


def sacct_rows(path: Path) -> list[dict]:
    """The rows of a `--parsable2` (or `sacctmgr -P`) file as dicts by the header's names; a line the
    file repeats (sacct.txt holds several listings, which overlap) once."""
    header, *lines = path.read_text().splitlines()
    names = header.split("|")
    return [dict(zip(names, line.split("|"))) for line in dict.fromkeys(lines)]


def job_chip_seconds(sacct: Path, cluster: str = "testfleet") -> dict[str, dict[str, float]]:
    """Per GPU job that has ended: requested GPUs × its queued and its allocated seconds.

    Lifetime runs from the first attempt's Submit to the last attempt's End; it is allocated
    from each attempt's Start to its End and queued the rest of the time.
    """
    attempts: dict[str, list[dict]] = {}
    for row in sacct_rows(sacct):
        gpus = re.search(r"gres/gpu=(\d+)", row["ReqTRES"])
        if gpus:
            attempts.setdefault(f"{cluster}/{row['JobID']}", []).append({**row, "gpus": int(gpus.group(1))})
    figures = {}
    for job, rows in attempts.items():
        rows.sort(key=lambda r: r["Submit"])
        if rows[-1]["End"] in ("Unknown", "None"):
            continue
        lifetime = utc_seconds(rows[-1]["End"]) - utc_seconds(rows[0]["Submit"])
        allocated = sum(
            utc_seconds(r["End"]) - utc_seconds(r["Start"]) for r in rows if r["Start"] not in ("Unknown", "None")
        )
        gpus = rows[0]["gpus"]
        figures[job] = {"queued_chip_s": gpus * (lifetime - allocated), "all_allocated_chip_s": gpus * allocated}
    return figures


def node_downtime_s(events: Path) -> dict[str, int]:
    """Seconds each node was down, drained or failing, from the node events that have ended."""
    downtime: dict[str, int] = {}
    for row in sacct_rows(events):
        if row["NodeName"] and row["TimeEnd"] not in ("Unknown", "None"):
            downtime[row["NodeName"]] = downtime.get(row["NodeName"], 0) + (
                utc_seconds(row["TimeEnd"]) - utc_seconds(row["TimeStart"])
            )
    return downtime


def node_gpus(nodes: Path) -> dict[str, tuple[str, int]]:
    """Node → (GRES type, GPUs) from `scontrol show node -o`."""
    found = {}
    for line in nodes.read_text().splitlines():
        name, gres = re.search(r"NodeName=(\S+)", line), re.search(r"Gres=gpu:(\w+):(\d+)", line)
        if name and gres:
            found[name.group(1)] = (gres.group(1), int(gres.group(2)))
    return found


def capacity_chip_seconds(
    sacct: Path, events: Path, nodes: Path, first: int | None = None
) -> tuple[int, int, dict[str, int]]:
    """(first, last end, chip-seconds online per GRES type between them): every node's GPUs the
    whole time, less each node's downtime. `first` defaults to the first submission."""
    rows = [r for r in sacct_rows(sacct) if re.search(r"gres/gpu=", r["ReqTRES"])]
    first = min(utc_seconds(r["Submit"]) for r in rows) if first is None else first
    last = max(utc_seconds(r["End"]) for r in rows if r["End"] not in ("Unknown", "None"))
    online: dict[str, int] = {}
    downtime = node_downtime_s(events)
    for node, (kind, gpus) in node_gpus(nodes).items():
        online[kind] = online.get(kind, 0) + gpus * (last - first - downtime.get(node, 0))
    return first, last, online


def interruptions(sacct: Path, cluster: str = "testfleet") -> set[tuple]:
    """(job, cause, seconds run, seconds until running again or None) for every attempt that ran and
    ended other than COMPLETED: an earlier attempt (requeued, preempted, node failure) or the last."""
    attempts: dict[str, list[dict]] = {}
    for row in sacct_rows(sacct):
        if re.search(r"gres/gpu=", row["ReqTRES"]):
            attempts.setdefault(f"{cluster}/{row['JobID']}", []).append(row)
    found = set()
    for job, rows in attempts.items():
        rows.sort(key=lambda r: r["Submit"])
        for row, following in zip(rows, rows[1:] + [None]):
            # A job cancelled while pending may read Start = End; nothing was allocated (AllocTRES empty).
            ran = row["Start"] not in ("Unknown", "None") and row["End"] not in ("Unknown", "None") and row["AllocTRES"]
            cause = row["State"].split()[0]
            if not ran or (following is None and cause == "COMPLETED"):
                continue
            again = (
                utc_seconds(following["Start"]) - utc_seconds(row["End"])
                if following is not None and following["Start"] not in ("Unknown", "None")
                else None
            )
            found.add((job, cause, utc_seconds(row["End"]) - utc_seconds(row["Start"]), again))
    return found
