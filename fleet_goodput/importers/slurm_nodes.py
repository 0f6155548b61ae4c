"""Slurm's nodes → CAPACITY: the node inventory (`scontrol show node -o`), the node events
(`sacctmgr -P show event`) that take nodes out, and the hostlists (`gpu[01-08]`) that name them.

CAPACITY per cluster and accelerator, from the history's origin on, is the GPUs
of the inventory, lowered while a node is down, drained or failing and raised
when it returns (docs/slurm.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fleet_goodput.importers.common import Imported, Unmappable
from fleet_goodput.importers.reading import PLAUSIBLE_CHIPS, bounded_lines
from fleet_goodput.importers.slurm_files import (
    CONTROL_CHARACTER,
    EVENTS,
    MAX_ROW_BYTES,
    NODES,
    PREFIX,
    TimeReader,
    number_ranges,
    parsable_rows,
    whole_number,
)

# Node names of one hostlist (`gpu[001-128]`): the largest clusters have some 10,000 nodes.
MAX_HOSTLIST_NODES = 100_000
# GPUs of one node: the densest servers hold 8 to 16 (a GB200 NVL72 rack 72); more is a typo or hostile.
MAX_GPUS_PER_NODE = 1_024
_TRES_GPU = re.compile(r"(?:^|,)gres/gpu(?::([^=,]+))?=(\d+)", re.ASCII)
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([^:,(]+))?:(\d+)", re.ASCII)


def tres_gpus(tres: str) -> tuple[int, str | None] | None:
    """(GPUs, GRES type or None) of a TRES list (`gres/gpu:h100=4,gres/gpu=4`); None without GPUs.
    Raises Unmappable for more than one GPU type."""
    total, types = None, {}
    for kind, count in _TRES_GPU.findall(tres):
        if kind:
            types[kind] = whole_number(count)
        else:
            total = whole_number(count)
    if len(types) > 1:
        raise Unmappable("more than one GPU type in one job", tres)
    if total is None and types:
        total = next(iter(types.values()))
    if not total:
        return None
    return total, next(iter(types), None)


def read_nodes(path: Path, imported: Imported) -> dict[str, dict]:
    """Node name → {gpus: [(type, count)], partitions: [..]} from `scontrol show node -o` lines, read as a
    stream; a line that is not a node's, or whose GPUs no node holds, is one rejection."""
    nodes = {}
    with open(path, "rb") as handle:
        for number, raw in bounded_lines(handle, MAX_ROW_BYTES):
            line = None if raw is None else raw.decode("utf-8", "replace")
            try:
                if line is None:
                    raise Unmappable(f"a line longer than {MAX_ROW_BYTES >> 20} MiB")
                if not line.strip():
                    continue
                name, node = _node(line)
            except Unmappable as exc:
                imported.reject(NODES, f"line {number}", (line or "")[:80].strip(), exc.reason, exc.detail)
                continue
            nodes[name] = node
    return nodes


def _node(line: str) -> tuple[str, dict]:
    pairs = dict(re.findall(r"(\w+)=(\S*)", line))
    if "NodeName" not in pairs:
        raise Unmappable("not a `scontrol show node -o` line (no NodeName=)")
    if CONTROL_CHARACTER.search(line.rstrip("\r\n")):
        raise Unmappable("a control character in the line", repr(line.strip()[:80]))
    gpus = [(kind or None, whole_number(count)) for kind, count in _GRES_GPU.findall(pairs.get("Gres", ""))]
    if not gpus:  # a node whose GPUs only its configured TRES lists (CfgTRES=...,gres/gpu:h100=8)
        configured = _TRES_GPU.findall(pairs.get("CfgTRES", ""))
        gpus = [(kind, whole_number(count)) for kind, count in configured if kind] or [
            (None, whole_number(count)) for kind, count in configured if not kind and whole_number(count)
        ]
    for _, count in gpus:
        if count > MAX_GPUS_PER_NODE:
            raise Unmappable(f"a node with more than {MAX_GPUS_PER_NODE:,} GPUs of a type", f"{count:,}")
    return pairs["NodeName"], {
        "gpus": gpus,
        "partitions": [p for p in pairs.get("Partitions", "").split(",") if p and p != "(null)"],
    }


@dataclass(frozen=True)
class Outage:
    node: str
    start_us: int
    end_us: int | None  # None: still out
    state: str
    reason: str


_HOSTLIST_PART = re.compile(r"([^,\[]+)(?:\[([^\]]*)\])?")


def hostlist_ranges(text: str) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """`gpu[01-03,07],cpu1` as [("gpu", [("01", 1, 3), ("07", 7, 7)]), ("cpu1", [])] (Slurm's hostlist
    notation), checked whole: at most MAX_HOSTLIST_NODES names, counted, not expanded; else Unmappable."""
    parts, count = [], 0
    for match in _HOSTLIST_PART.finditer(text):
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            parts.append((prefix, []))
            count += 1
            continue
        pieces = [
            (piece.partition("-")[0], low, high)  # the low end's digits give the names' width
            for piece, (low, high) in zip(ranges.split(","), number_ranges(ranges, 10**18, MAX_HOSTLIST_NODES, "node"))
        ]
        parts.append((prefix, pieces))
        count += sum(high - low + 1 for _, low, high in pieces)
        if count > MAX_HOSTLIST_NODES:
            raise Unmappable(f"more than {MAX_HOSTLIST_NODES:,} nodes in one row", repr(text[:80]))
    return parts


def expand_hostlist(text: str) -> Iterator[str]:
    """`gpu[01-03,07],cpu1` → its node names, one at a time (Slurm's hostlist notation). Raises Unmappable
    for a hostlist that is not one or names more than MAX_HOSTLIST_NODES nodes, before giving any."""
    for prefix, pieces in hostlist_ranges(text):
        if not pieces:
            if prefix and prefix != "None assigned":
                yield prefix
            continue
        for low_text, low, high in pieces:
            yield from (f"{prefix}{n:0{len(low_text)}d}" for n in range(low, high + 1))


def read_outages(path: Path, read_time: TimeReader, imported: Imported) -> list[Outage]:
    """Node events (a node down, drained, failing) from `sacctmgr -P show event`."""
    outages = []
    for row in parsable_rows(path, ("NodeName",)):
        fields = row.fields
        node = fields.get("NodeName", "").strip()
        if not node and not row.problem:
            continue  # a cluster event (its TRES registered), not a node's
        start_text = fields.get("TimeStart", fields.get("Start", ""))
        end_text = fields.get("TimeEnd", fields.get("End", ""))
        try:
            if row.problem:
                raise Unmappable(row.problem)
            if (
                CONTROL_CHARACTER.search(node)
                or CONTROL_CHARACTER.search(start_text)
                or CONTROL_CHARACTER.search(end_text)
            ):
                raise Unmappable("a control character in a field the mapping reads", repr(node[:80]))
            start = read_time(start_text, "event start")
            end = read_time(end_text, "event end")
            if start is None:
                raise Unmappable("a node event without a start", repr(start_text))
            names = list(expand_hostlist(node))
        except Unmappable as exc:
            imported.reject(EVENTS, row.where, node[:80], exc.reason, exc.detail)
            continue
        for name in names:
            outages.append(Outage(name, start, end, fields.get("State", ""), fields.get("Reason", "").strip()))
    return outages


def emit_capacity(imported, cluster, nodes, outages, accelerator_map, accelerators, origin_us, since_us) -> None:
    """A level per accelerator at the origin (every node's GPUs less those out then), and one at
    every later instant the level changes, from `since_us` on."""
    node_key: dict[str, list[tuple[str, int]]] = {}
    for name, node in nodes.items():
        for gres_type, count in node["gpus"]:
            try:
                node_key.setdefault(name, []).append(
                    (accelerator_map.key(gres_type, node["partitions"], accelerators), count)
                )
            except Unmappable as exc:
                imported.reject(NODES, "node", name, exc.reason, exc.detail)
    changes: dict[str, dict[int, int]] = {}
    for pieces in node_key.values():
        for key, count in pieces:
            changes.setdefault(key, {}).setdefault(origin_us, 0)
            changes[key][origin_us] += count
    for outage in _merged(outages):
        if outage.end_us is not None and outage.end_us <= origin_us:
            continue  # over before the origin
        for key, count in node_key.get(outage.node, []):
            start = max(outage.start_us, origin_us)
            changes[key][start] = changes[key].get(start, 0) - count
            if outage.end_us is not None and outage.end_us > start:
                changes[key][outage.end_us] = changes[key].get(outage.end_us, 0) + count
    for key, deltas in sorted(changes.items()):
        level, levels = 0, []
        for time_us, delta in sorted(deltas.items()):
            level += delta
            if (delta or time_us == origin_us) and (since_us is None or time_us >= since_us):
                levels.append((time_us, level))
        if any(chips > PLAUSIBLE_CHIPS for _, chips in levels):  # each node is bounded; this many nodes is not
            imported.reject(
                NODES,
                "file",
                f"capacity {cluster}/{key}",
                f"nodes hold more than {PLAUSIBLE_CHIPS:,} GPUs of one type",
                f"{max(chips for _, chips in levels):,}",
            )
            continue
        for time_us, chips in levels:
            _capacity(imported, cluster, key, time_us, chips)


def _merged(outages: list[Outage]) -> list[Outage]:
    """Each node's outages with overlapping ones joined (a DRAIN that becomes DOWN is one outage)."""
    merged: list[Outage] = []
    for outage in sorted(outages, key=lambda o: (o.node, o.start_us)):
        previous = merged[-1] if merged else None
        if (
            previous
            and previous.node == outage.node
            and (previous.end_us is None or outage.start_us <= previous.end_us)
        ):
            end = None if previous.end_us is None or outage.end_us is None else max(previous.end_us, outage.end_us)
            merged[-1] = Outage(previous.node, previous.start_us, end, previous.state, previous.reason)
        else:
            merged.append(outage)
    return merged


def _capacity(imported: Imported, cluster: str, accelerator: str, time_us: int, chips: int) -> None:
    imported.streams["scheduler"].append(
        {
            "event_id": f"{PREFIX}/capacity/{cluster}/{accelerator}/{time_us}",
            "event_time": time_us,
            "job_id": None,
            "type": "CAPACITY",
            "cluster": cluster,
            "accelerator": accelerator,
            "chips": chips,
            "workload": None,
            "framework": None,
            "team": None,
            "topology": None,
            "priority": None,
            "reason": None,
        }
    )
