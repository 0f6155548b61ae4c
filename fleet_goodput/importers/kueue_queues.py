"""Kueue's ResourceFlavors, ClusterQueues and Cohorts → the queue quota levels a scheduler file states.

A ResourceFlavor names, by its `spec.nodeLabels`, the nodes it stands for: their
labels map to an accelerator of the catalogue as a node's do. A ClusterQueue
(v1beta1 `spec.cohort`, v1beta2 `spec.cohortName`) gives per flavor its
`nominalQuota`, `borrowingLimit` and `lendingLimit` of each resource; of the
accelerator resources (nvidia.com/gpu, amd.com/gpu, google.com/tpu) the chips
are counted. Its status says, per flavor, the quota its admitted Workloads use
(`flavorsUsage[].resources[].total`) and how much of that is over its nominal
quota, borrowed from its cohort (`borrowed`). A Cohort (v1beta1 `spec.parent`,
v1beta2 `spec.parentName`) may hold quota of its own, a pool its members share.

Each snapshot whose figures differ from the one before is a level from the
time it was seen: the collector's `observedTime`; without one, the object's
creation for its first snapshot (a quota has held since the queue was made)
and the latest time the object records for a later one, with a caveat. The
levels go to the import's scheduler files as a statement
(fleet_goodput/telemetry/queue_quotas.py); docs/kubernetes.md, "Quotas and
borrowing", says what they answer and where they differ from Kueue's metrics.
"""

from __future__ import annotations

from fleet_goodput.importers.common import Unmappable
from fleet_goodput.importers.kubernetes_objects import CHIP_RESOURCES, Sink, Snapshot, k8s_time, quantity

KINDS = ("ResourceFlavor", "ClusterQueue", "Cohort")


def resource_flavor(snapshots: list[Snapshot], sink: Sink) -> None:
    """The flavor's accelerator, by its node labels (the latest snapshot's)."""
    latest = snapshots[-1]
    name = latest.metadata.get("name")
    if not isinstance(name, str) or not name:
        raise Unmappable("ResourceFlavor without metadata.name")
    labels = latest.spec.get("nodeLabels") or {}
    accelerator = sink.accelerator(labels) if isinstance(labels, dict) else None
    if accelerator is not None:
        sink.flavors[name] = accelerator


def queue(snapshots: list[Snapshot], sink: Sink, kind: str) -> None:
    """A ClusterQueue's or Cohort's levels per flavor of accelerator chips, each time they change."""
    latest = snapshots[-1]
    name = latest.metadata.get("name")
    if not isinstance(name, str) or not name:
        raise Unmappable(f"{kind} without metadata.name")
    previous: dict[str, tuple] = {}
    for number, snapshot in enumerate(snapshots):
        figures = _figures(snapshot, kind)
        if not figures or figures == previous:
            continue
        start_us = _seen(snapshot, sink, kind, name, first=number == 0)
        for flavor, levels in sorted(figures.items()):
            if previous.get(flavor) == levels:
                continue
            accelerator = sink.flavors.get(flavor) or sink.default_accelerator
            if accelerator is None:
                sink.imported.caveat(
                    snapshot.file,
                    f"{kind} {name}",
                    "a flavor whose ResourceFlavor the streams do "
                    "not hold (or whose node labels map to no accelerator): its quota is not "
                    "counted",
                    flavor,
                )
                continue
            nominal, borrowing, lending, usage, borrowed = levels
            sink.quotas.append(
                {
                    "cluster": sink.cluster,
                    "kind": kind,
                    "name": name,
                    "cohort": _cohort(snapshot, kind),
                    "flavor": flavor,
                    "accelerator": accelerator,
                    "start_us": start_us,
                    "nominal": nominal,
                    "borrowing_limit": borrowing,
                    "lending_limit": lending,
                    "usage": usage,
                    "borrowed": borrowed,
                }
            )
        previous = figures


def _cohort(snapshot: Snapshot, kind: str) -> str | None:
    """A ClusterQueue's cohort, a Cohort's parent (v1beta2's names first, then v1beta1's)."""
    keys = ("cohortName", "cohort") if kind == "ClusterQueue" else ("parentName", "parent")
    found = next((snapshot.spec.get(key) for key in keys if snapshot.spec.get(key)), None)
    return found if isinstance(found, str) else None


def _figures(snapshot: Snapshot, kind: str) -> dict[str, tuple]:
    """flavor → (nominal, borrowing limit, lending limit, usage, borrowed), in chips, of the accelerator
    resources the snapshot gives quota for; limits and status figures None where not given."""
    quotas = {}
    for group in snapshot.spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource.get("name") in CHIP_RESOURCES:
                    quotas[flavor.get("name")] = tuple(
                        None if resource.get(key) is None else quantity(resource[key], f"{kind} {key}")
                        for key in ("nominalQuota", "borrowingLimit", "lendingLimit")
                    )
    used = {}
    for flavor in (snapshot.status.get("flavorsUsage") or []) if kind == "ClusterQueue" else []:
        for resource in flavor.get("resources") or []:
            if resource.get("name") in CHIP_RESOURCES:
                used[flavor.get("name")] = tuple(
                    quantity(resource.get(key) or 0, f"flavorsUsage {key}") for key in ("total", "borrowed")
                )
    if any(not isinstance(flavor, str) or not flavor for flavor in quotas):
        raise Unmappable(f"{kind} with a flavor without a name")
    return {
        flavor: (*levels, *used.get(flavor, (None, None))) for flavor, levels in quotas.items() if levels[0] is not None
    }


def _seen(snapshot: Snapshot, sink: Sink, kind: str, name: str, first: bool) -> int:
    if snapshot.observed_us is not None:
        return snapshot.observed_us
    created = snapshot.metadata.get("creationTimestamp")
    if first and created:
        return k8s_time(created, "metadata.creationTimestamp")
    time_us, _ = snapshot.seen_us()
    sink.imported.caveat(
        snapshot.file,
        f"{kind} {name}",
        "no observedTime: the latest time the object records is taken",
        "a quota or usage level",
    )
    return time_us
