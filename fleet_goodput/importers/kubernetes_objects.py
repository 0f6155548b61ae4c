"""Kubernetes objects (Kueue Workload, LocalQueue, JobSet, batch Job) → scheduler events.

Each function takes every snapshot the input holds of one object (one uid), in
resourceVersion order, and emits its events through a `Sink`. An event's id
is built from the object's uid and the fact it records (a condition's
lastTransitionTime, a restart number), never from where or how often it was
seen: a re-listed object, a repeated or reordered watch event, or a file
read twice gives the same ids, and the sink keeps the first. Nodes (CAPACITY)
are mapped in fleet_goodput/importers/kubernetes_nodes.py, Kueue's queues in
kueue_queues.py. The mapping and what it cannot know are in docs/kubernetes.md.

Times are the ones Kubernetes records in the object (creationTimestamp,
conditions' lastTransitionTime, deletionTimestamp). What it does not record
(the moment all of a JobSet's pods were ready, a cordon, a deletion without a
deletionTimestamp) takes the time the collector stamped on the watch event
(`observedTime`), or else the latest time the object records, with a caveat.
"""

from __future__ import annotations

import re

from dataclasses import dataclass, field

from fleet_goodput.core.timeutil import parse_time_us
from fleet_goodput.importers.common import Imported, Unmappable
from fleet_goodput.importers.reading import MAX_CHIPS, chip_count, event_time_us

PREFIX = "k8s"
# Extended resources that count accelerator chips, in the order they are looked for.
CHIP_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "google.com/tpu")
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # a JobSet or Job with it is admitted through a Workload
# Node or pod label → its value → accelerator catalogue key. `--accelerator-labels FILE` adds to it.
ACCELERATOR_LABELS = {
    "cloud.google.com/gke-tpu-accelerator": {
        "tpu-v4-podslice": "tpu-v4",
        "tpu-v5-lite-podslice": "tpu-v5e",
        "tpu-v5-lite-device": "tpu-v5e",
        "tpu-v5p-slice": "tpu-v5p",
        "tpu-v6e-slice": "tpu-v6e",
        "tpu7x": "tpu-v7",
    },
    "cloud.google.com/gke-accelerator": {
        "nvidia-tesla-t4": "t4",
        "nvidia-tesla-v100": "v100",
        "nvidia-tesla-a100": "a100",
        "nvidia-a100-80gb": "a100",
        "nvidia-l4": "l4",
        "nvidia-h100-80gb": "h100",
        "nvidia-h100-mega-80gb": "h100",
        "nvidia-h200-141gb": "h200",
        "nvidia-b200": "b200",
        "nvidia-gb200": "gb200",
    },
    "nvidia.com/gpu.product": {
        "Tesla-T4": "t4",
        "Tesla-V100-SXM2-16GB": "v100",
        "Tesla-V100-SXM2-32GB": "v100",
        "NVIDIA-A100-SXM4-40GB": "a100",
        "NVIDIA-A100-SXM4-80GB": "a100",
        "NVIDIA-L4": "l4",
        "NVIDIA-L40S": "l40s",
        "NVIDIA-H100-80GB-HBM3": "h100",
        "NVIDIA-H100-PCIe": "h100-pcie",
        "NVIDIA-H100-NVL": "h100-nvl",
        "NVIDIA-H200": "h200",
        "NVIDIA-GH200-480GB": "gh200",
        "NVIDIA-B200": "b200",
        "NVIDIA-GB200": "gb200",
    },
    "amd.com/gpu.product-name": {
        "AMD_Instinct_MI250X": "mi250x",
        "AMD_Instinct_MI300X": "mi300x",
        "AMD_Instinct_MI325X": "mi325x",
    },
}
# Kueue's Finished condition reasons (apis/kueue/v1beta2/workload_types.go); any other ends as CANCEL.
FINISHED_REASONS = {"Succeeded": "FINISH", "Failed": "FAIL"}


@dataclass
class Snapshot:
    """One sighting of an object: a watch event or an item of a list."""

    change: str  # ADDED, MODIFIED or DELETED (a list's items are ADDED)
    obj: dict
    observed_us: int | None  # the collector's stamp, when it wrote one
    file: str
    where: str

    @property
    def metadata(self) -> dict:
        return self.obj.get("metadata") or {}

    @property
    def status(self) -> dict:
        return self.obj.get("status") or {}

    @property
    def spec(self) -> dict:
        return self.obj.get("spec") or {}

    def condition(self, kind: str) -> dict | None:
        return next((c for c in self.status.get("conditions") or [] if c.get("type") == kind), None)

    def true_since(self, kind: str) -> int | None:
        """When condition `kind` became True, if it is True in this snapshot."""
        found = self.condition(kind)
        if found and found.get("status") == "True":
            return k8s_time(found.get("lastTransitionTime"), f"{kind}.lastTransitionTime")
        return None

    def recorded_times(self) -> list[int]:
        times = [
            self.metadata.get("creationTimestamp"),
            self.metadata.get("deletionTimestamp"),
            self.status.get("startTime"),
            self.status.get("completionTime"),
        ]
        for found in self.status.get("conditions") or []:
            times += [found.get("lastTransitionTime"), found.get("lastHeartbeatTime")]
        return [k8s_time(t, "a time") for t in times if t]

    def seen_us(self) -> tuple[int, bool]:
        """(when this state was seen, whether the collector said so): else the latest time the object records."""
        if self.observed_us is not None:
            return self.observed_us, True
        recorded = self.recorded_times()
        if not recorded:
            raise Unmappable("no time for a state: no observedTime and no time in the object")
        return max(recorded), False


def k8s_time(text, what: str) -> int:
    """An RFC 3339 time as Kubernetes writes it (`2026-11-26T04:00:00Z`, or with microseconds) → µs."""
    if not isinstance(text, str):
        raise Unmappable(f"{what} is not a time", repr(text))
    try:
        return event_time_us(parse_time_us(text), what)
    except ValueError as exc:
        raise Unmappable(f"{what} is not an RFC 3339 time", repr(text)) from exc


def quantity(value, what: str) -> int:
    """A whole-number resource quantity (`"8"`, 8): accelerators are counted in whole devices."""
    text = str(value)
    if not text.isdigit() or len(text) > 10 or int(text) > MAX_CHIPS:
        raise Unmappable(f"{what} is not a whole number of devices up to {MAX_CHIPS:,}", repr(value)[:40])
    return int(text)


def chips_of(resources: dict) -> int:
    """Accelerator chips in a resource list (requests, limits, allocatable, resourceUsage)."""
    return sum(quantity(resources[name], name) for name in CHIP_RESOURCES if name in (resources or {}))


def pod_chips(template: dict) -> int:
    """Chips one pod of a pod template asks for: its containers' accelerator limits (or requests)."""
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    return sum(
        chips_of((c.get("resources") or {}).get("limits") or (c.get("resources") or {}).get("requests") or {})
        for c in containers
    )


def selectors(template: dict) -> dict[str, str]:
    """The node labels a pod template requires: its nodeSelector, and required node-affinity terms
    `In` a single value."""
    spec = (template or {}).get("spec") or {}
    found = {key: value for key, value in (spec.get("nodeSelector") or {}).items() if isinstance(value, str)}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            values = expression.get("values") or []
            if expression.get("operator") == "In" and len(values) == 1 and isinstance(values[0], str):
                found.setdefault(expression["key"], values[0])
    return found


@dataclass
class Sink:
    """Where a cluster's events go: each id once (the first wins), with the context the mapping needs."""

    imported: Imported
    cluster: str
    labels: dict[str, dict[str, str]]  # ACCELERATOR_LABELS with the user's additions
    accelerators: frozenset[str]
    default_accelerator: str | None
    cluster_queues: dict[tuple[str, str], str] = field(default_factory=dict)  # (namespace, LocalQueue) → ClusterQueue
    # The same, learned from the admissions of the LocalQueue's Workloads: where no LocalQueue object was
    # watched, a Workload never admitted still waits in the ClusterQueue its neighbours were admitted to.
    admitted_queues: dict[tuple[str, str], str] = field(default_factory=dict)
    # JobSet uid → the Workload that admits it: a JobSet restart under an admitted Workload interrupts that job.
    kueue_jobsets: dict[str, "AdmittedWorkload"] = field(default_factory=dict)
    flavors: dict[str, str] = field(default_factory=dict)  # ResourceFlavor → its accelerator catalogue key
    quotas: list[dict] = field(default_factory=list)  # queue quota levels (fleet_goodput/importers/kueue_queues.py)
    seen: set[str] = field(default_factory=set)
    skipped: dict[str, int] = field(default_factory=dict)

    def accelerator(self, labels: dict[str, str]) -> str | None:
        for label, values in self.labels.items():
            if labels.get(label) in values:
                return values[labels[label]]
        return self.default_accelerator

    def scheduler(
        self, event_id: str, kind: str, time_us: int, job_id: str, accelerator: str, chips: int, **fields
    ) -> None:
        if event_id in self.seen:
            return
        self.seen.add(event_id)
        record = {
            "event_id": event_id,
            "event_time": time_us,
            "job_id": job_id,
            "type": kind,
            "cluster": self.cluster,
            "accelerator": accelerator,
            "chips": chips,
            "workload": None,
            "framework": None,
            "team": None,
            "topology": None,
            "priority": None,
            "queue": None,
        }
        record.update(fields)
        self.imported.streams["scheduler"].append(record)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def mark(self) -> tuple[int, int, int]:
        return len(self.imported.streams["scheduler"]), len(self.imported.caveats), len(self.quotas)

    def undo(self, mark: tuple[int, int, int]) -> None:
        """Forget what an object emitted before it failed to map: it is rejected whole."""
        records, caveats, quotas = mark
        for record in self.imported.streams["scheduler"][records:]:
            self.seen.discard(record["event_id"])
        del self.imported.streams["scheduler"][records:]
        del self.imported.caveats[caveats:]
        del self.quotas[quotas:]


class Job:
    """The identity and request of one job (a Workload, or a JobSet or Job without Kueue)."""

    def __init__(self, sink: Sink, kind: str, latest: Snapshot, templates: list[tuple[int, dict]]):
        """`templates`: (pods, pod template) per group of identical pods."""
        metadata = latest.metadata
        self.sink, self.namespace, self.name = sink, metadata.get("namespace") or "default", metadata.get("name")
        uid, created = metadata.get("uid"), metadata.get("creationTimestamp")
        if not all(isinstance(text, str) and text for text in (uid, self.name, self.namespace, created)):
            raise Unmappable(f"{kind} without metadata.uid, name, namespace or creationTimestamp")
        self.job_id, self.prefix = f"{self.namespace}/{self.name}", f"{PREFIX}/{sink.cluster}/{kind.lower()}/{uid}"
        self.created_us = k8s_time(created, "metadata.creationTimestamp")
        self.per_pod = [(pods, pod_chips(template)) for pods, template in templates]
        self.chips = sum(pods * chips for pods, chips in self.per_pod)
        if self.chips <= 0:
            raise Unmappable(f"{kind} asks for no accelerator ({', '.join(CHIP_RESOURCES)})")
        chip_count(self.chips, f"{kind}'s chips")
        # Only the pods that ask for accelerators say which (a JobSet's CPU driver may run anywhere).
        wanted = [selectors(template) for (_, template), (_, chips) in zip(templates, self.per_pod) if chips]
        keys = {sink.accelerator(labels) for labels in wanted} - {None}
        if len(keys) != 1:
            raise Unmappable(
                "no accelerator label in the pod templates (nodeSelector) maps to one catalogue key",
                f"{', '.join(sorted(keys)) or 'none'}; pass --accelerator or --accelerator-labels",
            )
        self.accelerator = keys.pop()
        if self.accelerator not in sink.accelerators:
            raise Unmappable("accelerator not in the catalogue", self.accelerator)
        self.topology = next((labels[TOPOLOGY_LABEL] for labels in wanted if TOPOLOGY_LABEL in labels), None)

    def emit(self, what: str, kind: str, time_us: int, chips: int = 0, **fields) -> None:
        self.sink.scheduler(f"{self.prefix}/{what}", kind, time_us, self.job_id, self.accelerator, chips, **fields)

    def submit(self, **fields) -> None:
        self.emit(
            "submit", "SUBMIT", self.created_us, self.chips, team=self.namespace, topology=self.topology, **fields
        )

    def seen_at(self, snapshot: Snapshot, what: str) -> int:
        """When `snapshot` was seen; a caveat when only the object's own latest time says so."""
        time_us, stamped = snapshot.seen_us()
        if not stamped:
            self.sink.imported.caveat(
                snapshot.file, self.job_id, "no observedTime: the latest time the object records is taken", what
            )
        return time_us

    def deleted(self, snapshots: list[Snapshot], ended: bool) -> None:
        """A job deleted before any terminal condition ends as CANCEL, at its deletionTimestamp."""
        gone = next((s for s in snapshots if s.change == "DELETED"), None)
        if gone is None or ended:
            return
        stamp = gone.metadata.get("deletionTimestamp")
        time_us = k8s_time(stamp, "metadata.deletionTimestamp") if stamp else self.seen_at(gone, "deletion")
        self.emit("deleted", "CANCEL", time_us, reason="Deleted (before it finished)")


# ---- Kueue --------------------------------------------------------------------
def local_queue(snapshots: list[Snapshot], sink: Sink) -> None:
    latest = snapshots[-1]
    target = latest.spec.get("clusterQueue")
    if latest.metadata.get("name") and target:
        sink.cluster_queues[(latest.metadata.get("namespace") or "default", latest.metadata["name"])] = target


def _admitted_chips(job: Job, snapshot: Snapshot, pod_sets: list[dict]) -> int:
    """Chips of the admission: each podSetAssignment's resourceUsage, else its count × the pod's chips."""
    per_pod = {pod_set.get("name"): chips for pod_set, (_, chips) in zip(pod_sets, job.per_pod)}
    total = 0
    for assignment in (snapshot.status.get("admission") or {}).get("podSetAssignments") or []:
        usage = chips_of(assignment.get("resourceUsage") or {})
        total += usage or quantity(assignment.get("count", 0), "podSetAssignments[].count") * per_pod.get(
            assignment.get("name"), 0
        )
    # Admitted without an admission's counts (not seen from Kueue): admitted whole.
    return chip_count(total, "the admission's chips") if total else job.chips


def condition_reason(condition: dict | None) -> str | None:
    """A terminal condition's `reason: message` as the event's reason (at most 256 characters, no control
    characters, as the contract asks): `Failed: Job failed with exit code 137`, `BackoffLimitExceeded: ...`."""
    if not condition:
        return None
    parts = [str(condition.get(key) or "").strip() for key in ("reason", "message")]
    text = ": ".join(part for part in parts if part)
    text = re.sub(r"[\x00-\x1f\x7f-\x9f]+", " ", text)
    return (text[:253] + "...") if len(text) > 256 else (text or None)


@dataclass
class AdmittedWorkload:
    """What a JobSet's restarts need of the Workload that admits it: its job, and when it held what."""

    job: Job
    admissions: list[tuple[int, int]] = field(default_factory=list)  # (time, chips admitted)
    stops: list[int] = field(default_factory=list)  # evictions and the end

    def chips_at(self, time_us: int) -> int | None:
        """The chips admitted at `time_us`, or None when no admission holds then."""
        admitted = max((a for a in self.admissions if a[0] <= time_us), default=None)
        if admitted is None or any(admitted[0] <= stop <= time_us for stop in self.stops):
            return None
        return admitted[1]


def _eviction_reason(snapshot: Snapshot) -> str:
    evicted = snapshot.condition("Evicted") or {}
    preempted = snapshot.condition("Preempted") or {}
    cause = preempted.get("reason") if preempted.get("status") == "True" else None
    return f"{evicted.get('reason') or 'Evicted'}{f' ({cause})' if cause else ''}"


def workload(snapshots: list[Snapshot], sink: Sink) -> None:
    """Kueue Workload (v1beta1 or v1beta2): SUBMIT at creation, ALLOCATE at each Admitted, PREEMPT at
    each Evicted, FINISH/FAIL/CANCEL at Finished, CANCEL when deleted unfinished."""
    latest = snapshots[-1]
    pod_sets = latest.spec.get("podSets") or []
    job = Job(
        sink,
        "Workload",
        latest,
        [(quantity(p.get("count", 1), "podSets[].count"), p.get("template") or {}) for p in pod_sets],
    )
    local = latest.spec.get("queueName")
    admitted_in = next(
        (
            s.status["admission"].get("clusterQueue")
            for s in snapshots
            if (s.status.get("admission") or {}).get("clusterQueue")
        ),
        None,
    )
    cluster_queue = (
        sink.cluster_queues.get((job.namespace, local))
        or admitted_in
        or sink.admitted_queues.get((job.namespace, local))
        or ""
    )
    priority = latest.spec.get("priority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31
    ):
        raise Unmappable("spec.priority is not a 32-bit integer", repr(priority)[:40])
    job.submit(priority=priority, queue=f"{cluster_queue}/{job.namespace}/{local}" if local else None)
    evictions, ended = set(), False
    held = AdmittedWorkload(job)
    for snapshot in snapshots:
        if (since := snapshot.true_since("Admitted")) is not None:
            chips = _admitted_chips(job, snapshot, pod_sets)
            held.admissions.append((since, chips))
            job.emit(f"admitted/{since}", "ALLOCATE", since, chips)
        if (since := snapshot.true_since("Evicted")) is not None:
            evictions.add(since)
            held.stops.append(since)
            job.emit(f"evicted/{since}", "PREEMPT", since, 0, reason=_eviction_reason(snapshot))
        if (since := snapshot.true_since("Finished")) is not None:
            ended = True
            held.stops.append(since)
            finished = snapshot.condition("Finished")
            job.emit(
                "finished",
                FINISHED_REASONS.get(finished.get("reason"), "CANCEL"),
                since,
                reason=condition_reason(finished),
            )
    requeues = max(((s.status.get("requeueState") or {}).get("count") or 0 for s in snapshots), default=0)
    if requeues > len(evictions):
        sink.imported.caveat(
            latest.file,
            job.job_id,
            "requeueState counts evictions the stream does not hold",
            f"requeueState.count {requeues}, evictions seen {len(evictions)}",
        )
    job.deleted(snapshots, ended)
    for owner in latest.metadata.get("ownerReferences") or []:
        if owner.get("kind") == "JobSet" and isinstance(owner.get("uid"), str):
            sink.kueue_jobsets[owner["uid"]] = held


# ---- JobSet and Job without Kueue ----------------------------------------------
def _managed_elsewhere(latest: Snapshot, sink: Sink, kind: str) -> bool:
    if KUEUE_QUEUE_LABEL in (latest.metadata.get("labels") or {}):
        sink.skip(f"{kind} admitted through a Kueue Workload")
        return True
    if any(owner.get("kind") == "JobSet" for owner in latest.metadata.get("ownerReferences") or []):
        sink.skip(f"{kind} of a JobSet")
        return True
    return False


def _terminal(job: Job, snapshots: list[Snapshot], success: str) -> bool:
    """FINISH at the `success` condition, FAIL at Failed; whether either was seen."""
    ended = False
    for snapshot in snapshots:
        for condition, kind in ((success, "FINISH"), ("Failed", "FAIL")):
            if (since := snapshot.true_since(condition)) is not None:
                job.emit("ended", kind, since, reason=condition_reason(snapshot.condition(condition)))
                ended = True
    return ended


def _restart(snapshot: Snapshot) -> tuple[int, int | None, dict]:
    """(restarts so far, when the latest restart began if RestartingJobSet is True, the condition)."""
    return (
        snapshot.status.get("restarts") or 0,
        snapshot.true_since("RestartingJobSet"),
        snapshot.condition("RestartingJobSet") or {},
    )


def _ready_again(job: "Job", snapshot: Snapshot, restarting: dict, restarts: int) -> int:
    """When every child Job was ready again: RestartingJobSet's turn to False (JobsReady), else when seen."""
    settled = restarting.get("reason") == "JobsReady" and restarting.get("status") == "False"
    return (
        k8s_time(restarting.get("lastTransitionTime"), "RestartingJobSet.lastTransitionTime")
        if restarts and settled
        else job.seen_at(snapshot, "all child Jobs ready")
    )


def _child_jobs_ready(snapshot: Snapshot, child_jobs: int) -> bool:
    ready = sum(s.get("ready", 0) for s in snapshot.status.get("replicatedJobsStatus") or [])
    return ready >= child_jobs and snapshot.true_since("Completed") is None


def _child_jobs(latest: Snapshot) -> int:
    return sum(quantity(rj.get("replicas", 1), "replicas") for rj in latest.spec.get("replicatedJobs") or [])


def _missed_restarts(sink: Sink, job: "Job", latest: Snapshot, restarted: set[int]) -> None:
    missed = sorted(set(range(1, (latest.status.get("restarts") or 0) + 1)) - restarted)
    if missed:
        # Without RestartingJobSet=True the restart's time is unknown: not counted rather than guessed.
        sink.imported.caveat(
            latest.file,
            job.job_id,
            "JobSet restarts the stream does not hold",
            f"restarts {', '.join(map(str, missed))}",
        )


def kueue_jobset_restarts(snapshots: list[Snapshot], sink: Sink) -> None:
    """A JobSet Kueue admits is its Workload's job; a restart of it (the JobSet recreating its child Jobs
    after a failure) interrupts that job: PREEMPT at RestartingJobSet=True, ALLOCATE of the admitted chips
    when every child Job is ready again. A restart outside the Workload's admissions moves nothing."""
    latest = snapshots[-1]
    held = sink.kueue_jobsets.get(latest.metadata.get("uid"))
    if held is None:
        return  # its Workload is not in the streams (or could not be mapped): nothing to interrupt
    job, prefix = held.job, f"{PREFIX}/{sink.cluster}/jobset/{latest.metadata.get('uid')}"
    child_jobs, restarted, chips = _child_jobs(latest), set(), None
    for snapshot in snapshots:
        restarts, since, restarting = _restart(snapshot)
        if restarts and since is not None:
            chips = held.chips_at(since)
            restarted.add(restarts)
            if chips is None:
                sink.imported.caveat(
                    snapshot.file,
                    job.job_id,
                    "a JobSet restart while its Workload held no admission moves nothing",
                    f"restart {restarts}",
                )
                continue
            sink.scheduler(
                f"{prefix}/restart/{restarts}",
                "PREEMPT",
                since,
                job.job_id,
                job.accelerator,
                0,
                reason=f"JobSetRestart ({restarting.get('reason')})",
            )
        if restarts and restarts in restarted and _child_jobs_ready(snapshot, child_jobs):
            when = _ready_again(job, snapshot, restarting, restarts)
            if (chips := held.chips_at(when)) is not None:
                sink.scheduler(f"{prefix}/ready/{restarts}", "ALLOCATE", when, job.job_id, job.accelerator, chips)
    _missed_restarts(sink, job, latest, restarted)


def jobset(snapshots: list[Snapshot], sink: Sink) -> None:
    """JobSet (v1alpha2) without Kueue: SUBMIT at creation, ALLOCATE when every child Job is ready
    (per restart), PREEMPT at each restart, FINISH at Completed, FAIL at Failed. A JobSet Kueue admits
    gives only its restarts, to its Workload (`kueue_jobset_restarts`)."""
    latest = snapshots[-1]
    if _managed_elsewhere(latest, sink, "JobSet"):
        if KUEUE_QUEUE_LABEL in (latest.metadata.get("labels") or {}):
            kueue_jobset_restarts(snapshots, sink)
        return
    replicated = latest.spec.get("replicatedJobs") or []
    templates = []
    for rj in replicated:
        job_spec = (rj.get("template") or {}).get("spec") or {}
        pods = quantity(rj.get("replicas", 1), "replicas") * quantity(job_spec.get("parallelism", 1), "parallelism")
        templates.append((pods, job_spec.get("template") or {}))
    job = Job(sink, "JobSet", latest, templates)
    job.submit(priority=None)
    child_jobs, restarted = _child_jobs(latest), set()
    for snapshot in snapshots:
        restarts, since, restarting = _restart(snapshot)
        if restarts and since is not None:
            job.emit(f"restart/{restarts}", "PREEMPT", since, 0, reason=f"JobSetRestart ({restarting.get('reason')})")
            restarted.add(restarts)
        if _child_jobs_ready(snapshot, child_jobs):
            job.emit(f"ready/{restarts}", "ALLOCATE", _ready_again(job, snapshot, restarting, restarts), job.chips)
    _missed_restarts(sink, job, latest, restarted)
    job.deleted(snapshots, _terminal(job, snapshots, "Completed"))


def batch_job(snapshots: list[Snapshot], sink: Sink) -> None:
    """batch/v1 Job without Kueue or a JobSet: SUBMIT at creation, ALLOCATE when `parallelism` pods are
    ready, FINISH at Complete, FAIL at Failed."""
    latest = snapshots[-1]
    if _managed_elsewhere(latest, sink, "Job"):
        return
    parallelism = quantity(latest.spec.get("parallelism", 1), "parallelism")
    job = Job(sink, "Job", latest, [(parallelism, latest.spec.get("template") or {})])
    job.submit(priority=None)
    for snapshot in snapshots:
        if (snapshot.status.get("ready") or 0) >= parallelism:
            job.emit("ready/0", "ALLOCATE", job.seen_at(snapshot, "all pods ready"), job.chips)
    job.deleted(snapshots, _terminal(job, snapshots, "Complete"))
