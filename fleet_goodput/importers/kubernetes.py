"""Kubernetes watch streams and lists (Kueue Workloads, JobSets, Jobs, Nodes) → scheduler events.

SOURCE is one or more files (or folders of `*.json`, `*.jsonl` and their `.gz`)
as `kubectl get … --watch --output-watch-events -o json` writes them: one
`{"type": "ADDED"|"MODIFIED"|"DELETED", "object": {…}}` after another, one per
line or pretty-printed, optionally with the collector's `"observedTime"`
beside `type`; or as `kubectl get … -o json` writes a list (`"kind": "…List"`,
`"items": […]`). Kinds read: Workload (kueue.x-k8s.io v1beta1 and v1beta2),
LocalQueue (to name a Workload's ClusterQueue), ResourceFlavor, ClusterQueue and
Cohort (their quotas: `kueue_queues`), JobSet (jobset.x-k8s.io), Job (batch/v1)
and Node. The mapping per kind is in `kubernetes_objects` (Nodes: `kubernetes_nodes`);
the whole story (collecting, what is knowable) in docs/kubernetes.md.

Every object is mapped from all its snapshots in all the files together, in
resourceVersion order, with event ids derived from what Kubernetes recorded:
reading a file twice, overlapping rolling files, or a watch that re-lists
gives the same events once.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from fleet_goodput.core.config import ConfigError, read_yaml
from fleet_goodput.importers import kubernetes_nodes as nodes
from fleet_goodput.importers import kubernetes_objects as objects
from fleet_goodput.importers import kueue_queues
from fleet_goodput.importers.common import Imported, Options, SourceError, Unmappable
from fleet_goodput.importers.reading import decode_json_at, file_digest, progress, read_text

NAME = "kubernetes"
HELP = "kubectl watch streams / lists of Kueue Workloads, JobSets, Jobs, Nodes → scheduler events (needs --cluster)"
MANY_SOURCES = True  # `mpg import kubernetes FILE… --cluster NAME`
SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
CHANGES = ("ADDED", "MODIFIED", "DELETED")
# LocalQueues first, since Workloads name their ClusterQueue through them; then Workloads, since a
# JobSet's restarts interrupt the Workload that admits it.
MAPPING_ORDER = {"LocalQueue": 0, "Workload": 1, "ResourceFlavor": 2}  # flavors before the queues naming them
# kind → its mapping.
JOB_KINDS = {"Workload": objects.workload, "JobSet": objects.jobset, "Job": objects.batch_job}
# kind → the API group (apiVersion before the `/`) it must come from; core kinds have none.
GROUPS = {
    "Workload": "kueue.x-k8s.io",
    "LocalQueue": "kueue.x-k8s.io",
    "ResourceFlavor": "kueue.x-k8s.io",
    "ClusterQueue": "kueue.x-k8s.io",
    "Cohort": "kueue.x-k8s.io",
    "JobSet": "jobset.x-k8s.io",
    "Job": "batch",
    "Node": "",
}

PROVENANCE = {
    "source": "Kubernetes API objects as kubectl writes them (watch events or lists)",
    "licence": "your cluster's own telemetry",
    "mapping": [
        "job id <namespace>/<name> of the Kueue Workload, or of the JobSet or Job no Workload admits",
        "Workload: SUBMIT at creationTimestamp, chips = sum of podSets count x the pod's accelerator limits; "
        "ALLOCATE at each Admitted=True (lastTransitionTime) with the admission's podSetAssignments "
        "(resourceUsage, else count x the pod's chips; below the request = partial); PREEMPT (0 chips) at each "
        "Evicted=True, reason = Evicted's reason (Preempted's reason); Finished=True: Succeeded FINISH, Failed FAIL, "
        "else CANCEL; deleted without Finished: CANCEL at deletionTimestamp",
        "Workload queue = <ClusterQueue>/<namespace>/<LocalQueue>; team = namespace; priority = spec.priority",
        "JobSet / Job without Kueue: SUBMIT at creation; ALLOCATE when every child Job (every pod of a Job) is "
        "ready, per JobSet restart; PREEMPT at RestartingJobSet=True; FINISH at Completed (Complete), FAIL at Failed",
        "JobSet admitted by a Workload (its owner): each restart while admitted is PREEMPT, then ALLOCATE of the "
        "admitted chips when every child Job is ready again, on the Workload's job",
        "Node: allocatable nvidia.com/gpu, amd.com/gpu or google.com/tpu counts in CAPACITY per accelerator "
        "while Ready, not cordoned (spec.unschedulable) and not deleted",
        "ClusterQueue and Cohort: nominal quota, borrowing and lending limits of accelerator chips per flavor "
        "(ResourceFlavor nodeLabels → accelerator), and a ClusterQueue's status usage and borrowed, as levels the "
        "scheduler files state (fleet_goodput.queue_quotas metadata), each from when it was seen",
    ],
    "cannot_tell": [
        "runtime and profiler: no runtime stream, so all-allocated time is unmeasured (`unmeasured` badput), and "
        "RG, PG and MPG are unknown until the job's runtime events are added",
        "transitions between two sightings of an object: a condition keeps only its last transition, so a "
        "gap in the watch loses the cycles inside it (a Workload's requeueState.count says how many; caveat)",
        "times Kubernetes does not record (all pods ready, a cordon, a deletion without deletionTimestamp) "
        "are the collector's observedTime, else the latest time the object records (caveat)",
    ],
}


def sources(paths: list[Path]) -> list[Path]:
    """The files named, and the watch files inside the folders named, in name order."""
    found = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
        elif path.is_file():
            found.append(path)
        else:
            raise SourceError(path, None, "missing: expected a watch stream or list file, or a folder of them")
    if not found:
        raise SourceError(paths[0], None, f"no watch files ({', '.join(SUFFIXES)}) found")
    return found


def json_values(text: str):
    """(line, value or None) for every JSON value in `text`, whether one per line or pretty-printed.

    A value that does not parse (the half-written last line of a file a
    collector is still writing) is given as None, and reading resumes at
    the next line."""
    position, length, line, counted = 0, len(text), 1, 0
    while True:
        while position < length and text[position].isspace():
            position += 1
        if position >= length:
            return
        line, counted = line + text.count("\n", counted, position), position
        try:
            value, position = decode_json_at(text, position)  # refuses NaN, Infinity and runaway nesting
            yield line, value
        except (json.JSONDecodeError, Unmappable):
            yield line, None
            newline = text.find("\n", position)
            position = length if newline < 0 else newline + 1


def _snapshots(value, file: str, where: str):
    """The object snapshots one JSON value holds: a watch event, a list, or one object."""
    if not isinstance(value, dict):
        raise Unmappable("not a watch event, list or object")
    if "object" in value and "type" in value:
        change = value["type"]
        if change == "BOOKMARK":
            return []
        if change == "ERROR":  # e.g. 410 Gone: the watch must re-list, which the next file holds
            raise Unmappable("watch ERROR event", str((value.get("object") or {}).get("message", ""))[:200])
        if change not in CHANGES:
            raise Unmappable("unknown watch event type", repr(change)[:40])
        stamp = value.get("observedTime")
        observed = objects.k8s_time(stamp, "observedTime") if stamp is not None else None
        return [objects.Snapshot(change, _object(value["object"]), observed, file, where)]
    if isinstance(value.get("items"), list):
        return [
            objects.Snapshot("ADDED", _object(item), None, file, f"{where} item {n}")
            for n, item in enumerate(value["items"])
        ]
    if "kind" in value:
        return [objects.Snapshot("ADDED", _object(value), None, file, where)]
    raise Unmappable("not a watch event, list or object")


def _object(value) -> dict:
    """A Kubernetes object: a mapping whose metadata, spec and status (where given) are mappings,
    named by a uid or a name."""
    if not isinstance(value, dict) or not all(
        isinstance(value.get(part, {}), dict) for part in ("metadata", "spec", "status")
    ):
        raise Unmappable("not a Kubernetes object")
    if not all(isinstance(value.get(part, ""), str) for part in ("kind", "apiVersion")):
        raise Unmappable("kind or apiVersion is not a string", repr(value.get("kind"))[:80])
    metadata = value.get("metadata", {})
    if not isinstance(metadata.get("uid") or metadata.get("name"), str):
        raise Unmappable("an object without metadata.uid or name")
    return value


def _version(snapshot: objects.Snapshot) -> tuple:
    """Order of an object's snapshots: its resourceVersion (etcd's revision), a DELETED last among equals."""
    version = str(snapshot.metadata.get("resourceVersion", ""))
    return (int(version) if version.isdigit() else -1, snapshot.change == "DELETED", snapshot.observed_us or 0)


def admitted_queues(by_object: dict[tuple[str, str], list[objects.Snapshot]]) -> dict[tuple[str, str], str]:
    """(namespace, LocalQueue) → the ClusterQueue its Workloads were last admitted to (the latest admission
    by resourceVersion), for Workloads whose LocalQueue object the watch did not hold."""
    learned: dict[tuple[str, str], tuple[tuple, str]] = {}
    for (kind, _), snapshots in by_object.items():
        if kind != "Workload":
            continue
        for snapshot in snapshots:
            admission = snapshot.status.get("admission") if isinstance(snapshot.status, dict) else None
            queue = snapshot.spec.get("queueName")
            if (
                isinstance(admission, dict)
                and isinstance(admission.get("clusterQueue"), str)
                and isinstance(queue, str)
            ):
                key = (snapshot.metadata.get("namespace") or "default", queue)
                order = _version(snapshot)
                if key not in learned or order > learned[key][0]:
                    learned[key] = (order, admission["clusterQueue"])
    return {key: queue for key, (_, queue) in learned.items()}


def watched_period(cluster: str, by_object: dict[tuple[str, str], list[objects.Snapshot]]) -> dict | None:
    """What the watch observed of `cluster` (fleet_goodput/telemetry/observed.py): from its start to its
    latest heartbeat. With the collector's `observedTime` stamps, from the first stamp to the last; without,
    from the earliest time a Node's first snapshot was current (its latest heartbeat or transition then: a
    node reports every few minutes, so its first sighting is the watch's start, where a Ready condition's
    lastTransitionTime can be weeks before) to the latest time any snapshot records. None: no time at all."""
    stamps = [s.observed_us for snapshots in by_object.values() for s in snapshots if s.observed_us is not None]
    if stamps:
        return {cluster: (min(stamps), max(stamps))}
    ends, node_starts = [], []
    for (kind, _), snapshots in by_object.items():
        try:  # each snapshot's latest recorded time: when that state was current
            current = [time_us for s in snapshots if (time_us := max(s.recorded_times(), default=None)) is not None]
        except Unmappable:
            continue  # a time of the object's own that its mapping rejects
        ends += current
        if kind == "Node" and current:
            node_starts.append(min(current))
    if not ends:
        return None
    to_us = max(ends)
    return {cluster: (min(min(node_starts or ends), to_us), to_us)}


def label_map(path: str | None) -> dict[str, dict[str, str]]:
    """The accelerator label map: the built-in one, with a user's YAML `{label: {value: key}}` on top."""
    labels = {label: dict(values) for label, values in objects.ACCELERATOR_LABELS.items()}
    if path:
        extra = read_yaml(path)
        for label, values in extra.items():
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                raise ConfigError(f"{path}: {label} must map label values to accelerator catalogue keys")
            labels.setdefault(str(label), {}).update({str(value): key for value, key in values.items()})
    return labels


def read(source: list[Path] | Path, options: Options) -> Imported:
    if not options.cluster:
        raise ValueError("mpg import kubernetes needs --cluster NAME: the cluster these objects belong to")
    files = sources(source if isinstance(source, list) else [source])
    imported = Imported(NAME)
    sink = objects.Sink(
        imported, options.cluster, label_map(options.accelerator_labels), options.accelerators, options.accelerator
    )
    by_object: dict[tuple[str, str], list[objects.Snapshot]] = defaultdict(list)
    latest_us = None
    for path in progress(files, "kubernetes files", unit="file"):
        for line, value in json_values(read_text(path, options.max_expanded_bytes)):
            where = f"line {line}"
            try:
                if value is None:
                    raise Unmappable("not valid JSON (a line cut short by a collector still writing?)")
                for snapshot in _snapshots(value, path.name, where):
                    kind, uid = snapshot.obj.get("kind"), snapshot.metadata.get("uid") or snapshot.metadata.get("name")
                    group = str(snapshot.obj.get("apiVersion", "")).rpartition("/")[0]
                    if GROUPS.get(kind) != group:
                        raise Unmappable("kind not imported", f"{snapshot.obj.get('apiVersion')} {kind}"[:80])
                    by_object[(kind, uid)].append(snapshot)
                    if snapshot.observed_us is not None:
                        latest_us = max(latest_us or 0, snapshot.observed_us)
            except Unmappable as exc:
                imported.reject(path.name, where, "", exc.reason, exc.detail)
    sink.admitted_queues = admitted_queues(by_object)
    histories: dict[str, nodes.NodeHistory] = {}
    order = sorted(by_object, key=lambda key: (MAPPING_ORDER.get(key[0], len(MAPPING_ORDER)), key))
    for kind, uid in order:
        snapshots = sorted(by_object[(kind, uid)], key=_version)
        latest = snapshots[-1]
        item = f"{kind} {latest.metadata.get('namespace', '')}/{latest.metadata.get('name', uid)}".replace(" /", " ")
        mark = sink.mark()
        try:
            if kind == "LocalQueue":
                objects.local_queue(snapshots, sink)
            elif kind == "ResourceFlavor":
                kueue_queues.resource_flavor(snapshots, sink)
            elif kind in ("ClusterQueue", "Cohort"):
                kueue_queues.queue(snapshots, sink, kind)
            elif kind == "Node":
                nodes.node(snapshots, sink, histories)
            else:
                JOB_KINDS[kind](snapshots, sink)
        except Unmappable as exc:
            sink.undo(mark)
            imported.reject(latest.file, latest.where, item, exc.reason, exc.detail)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:  # a field of another type than the API's
            sink.undo(mark)
            imported.reject(
                latest.file,
                latest.where,
                item,
                "a field of a type its API does not give it",
                f"{type(exc).__name__}: {exc}"[:200],
            )
    nodes.capacity_levels(sink, histories, latest_us)
    imported.observed = watched_period(options.cluster, by_object)
    imported.queue_quotas = sink.quotas
    imported.provenance = {
        **PROVENANCE,
        "cluster": options.cluster,
        "inputs": [file_digest(path) for path in files],
        "skipped": dict(sorted(sink.skipped.items())),
        "accelerator_labels": sink.labels,
    }
    return imported
