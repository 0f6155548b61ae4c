"""Kubernetes Nodes → CAPACITY: the accelerator chips a cluster offers over time.

A Node's allocatable chips count while it is Ready, not cordoned and not deleted;
`node` gathers every snapshot of one Node into its `NodeHistory`, and
`capacity_levels` sums them per accelerator into CAPACITY levels. The other
objects (Kueue Workload, JobSet, batch Job) are mapped in
fleet_goodput/importers/kubernetes_objects.py, whose `Snapshot` and `Sink` these use;
docs/kubernetes.md says what the nodes cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet_goodput.importers.common import Unmappable, capacity
from fleet_goodput.importers.kubernetes_objects import PREFIX, Sink, Snapshot, chips_of, k8s_time
from fleet_goodput.importers.reading import MAX_CHIPS

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"  # what `kubectl cordon` adds


@dataclass
class NodeHistory:
    """What is known of one node: the times its Ready, schedulable and present states changed."""

    accelerator: str
    chips: int
    changes: dict[int, dict[str, bool]] = field(default_factory=dict)  # time → {state: value}

    def set(self, time_us: int, state: str, value: bool) -> None:
        self.changes.setdefault(time_us, {})[state] = value

    def levels(self) -> list[tuple[int, int]]:
        """(time, chips it counts from then): only while Ready, schedulable and present."""
        state, out = {"ready": False, "schedulable": True, "present": True}, []
        for time_us in sorted(self.changes):
            state.update(self.changes[time_us])
            out.append((time_us, self.chips if all(state.values()) else 0))
        return out


def node(snapshots: list[Snapshot], sink: Sink, histories: dict[str, NodeHistory]) -> None:
    """A Node's accelerator chips (allocatable) count in capacity while it is Ready, not cordoned
    and not deleted. The levels are summed per accelerator by `capacity_levels`."""
    latest = snapshots[-1]
    chips = chips_of((latest.status.get("allocatable") or {}))
    if not chips:
        sink.skip("Node without accelerators")
        return
    name = latest.metadata.get("name") or "?"
    accelerator = sink.accelerator(latest.metadata.get("labels") or {})
    if accelerator is None or accelerator not in sink.accelerators:
        raise Unmappable("no node label maps to a catalogue key", f"{accelerator or 'none'}; pass --accelerator-labels")
    facts = []  # (time, state, value), all read before any is kept
    for snapshot in snapshots:
        ready = snapshot.condition("Ready")
        if ready and ready.get("lastTransitionTime"):
            facts.append(
                (
                    k8s_time(ready["lastTransitionTime"], "Ready.lastTransitionTime"),
                    "ready",
                    ready.get("status") == "True",
                )
            )
        seen_us, _ = snapshot.seen_us()
        cordoned = snapshot.spec.get("unschedulable", False)
        facts.append((_cordoned_at(snapshot) or seen_us if cordoned else seen_us, "schedulable", not cordoned))
        if snapshot.change == "DELETED":
            stamp = snapshot.metadata.get("deletionTimestamp")
            facts.append((k8s_time(stamp, "metadata.deletionTimestamp") if stamp else seen_us, "present", False))
    history = histories.setdefault(latest.metadata.get("uid") or name, NodeHistory(accelerator, chips))
    for fact in facts:
        history.set(*fact)


def _cordoned_at(snapshot: Snapshot) -> int | None:
    """When the node was cordoned, where its unschedulable taint records it (`timeAdded`)."""
    taint = next((t for t in snapshot.spec.get("taints") or [] if t.get("key") == UNSCHEDULABLE_TAINT), None)
    return k8s_time(taint["timeAdded"], "taint timeAdded") if taint and taint.get("timeAdded") else None


def capacity_levels(sink: Sink, histories: dict[str, NodeHistory], until_us: int | None) -> None:
    """CAPACITY per accelerator at every time the sum over nodes changes, restated at `until_us`
    (the latest time the input saw) so that a run's as-of time reaches it."""
    for accelerator in sorted({h.accelerator for h in histories.values()}):
        nodes = [h.levels() for h in histories.values() if h.accelerator == accelerator]
        times = sorted({time_us for levels in nodes for time_us, _ in levels})
        previous = changed_us = None
        for time_us in times:
            level = sum(next((chips for t, chips in reversed(levels) if t <= time_us), 0) for levels in nodes)
            if level > MAX_CHIPS:  # only nodes that claim absurd counts get here
                sink.imported.reject(
                    "",
                    "",
                    f"capacity {accelerator}",
                    "nodes hold more chips than an event can",
                    f"{level:,} at {time_us} µs",
                )
                break
            if level != previous:
                capacity(sink.imported, PREFIX, sink.cluster, accelerator, time_us, level)
                previous, changed_us = level, time_us
        if until_us is not None and changed_us is not None and until_us > changed_us:
            capacity(sink.imported, PREFIX, sink.cluster, accelerator, until_us, previous)
