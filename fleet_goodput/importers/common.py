"""The import's model: what an importer reads a source into, and how it says what it could not map.

An importer reads a public trace into an `Imported`: the three streams as records of the
contract's schemas (a job's through a `JobEmitter`, a cluster's CAPACITY levels through
`capacity`), the rejections, the caveats and a provenance record. Its errors say whether the
source is unreadable (SourceError), past a limit (Refused), a record is unmappable (Unmappable)
or the flags are wrong (UsageError). Reading a source within its limits is
fleet_goodput/importers/reading.py's; writing an `Imported` as an import's folder is
fleet_goodput/importers/import_folder.py's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fleet_goodput import schemas
from fleet_goodput.core.timeutil import micros_of
from fleet_goodput.importers.records import Records

# Limits on what one input may make an import hold or emit (docs/importers.md, "Limits").
# A JSON document takes several times its size in memory once parsed.
DEFAULT_MAX_EXPANDED_MIB = 512
DEFAULT_MAX_EXPANDED_BYTES = DEFAULT_MAX_EXPANDED_MIB << 20


class SourceError(ValueError):
    """A source file that cannot be read as its format: corrupt, truncated, or not that format.

    The message names the file and, where it can, the line (or record) at fault.
    """

    def __init__(self, path: Path | str, where: str | None, problem: str):
        self.path, self.where, self.problem = str(path), where, problem
        super().__init__(f"{path}{f':{where}' if where else ''}: {problem}")


class UsageError(ValueError):
    """Bad arguments for this source: a required flag the source does not make up for, or one
    that contradicts it. `mpg import` exits 2 (exits.USAGE) with the message, which names the flag."""


class Refused(SourceError):
    """An input past one of the limits: it expands past the cap, is nested too deep, or holds
    numbers that are not finite. An importer of many inputs (traces, runs, log lines) rejects it
    and goes on; where it is the only input, the import stops with it."""

    def __init__(self, path: Path | str, where: str | None, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(path, where, f"{reason}{f' ({detail})' if detail else ''}")


class Unmappable(ValueError):
    """A record that parses but cannot be mapped: `reason` is generic (rejections group by it)."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}{f' ({detail})' if detail else ''}")


@dataclass(frozen=True)
class Options:
    """Settings an importer may use; each importer says which it needs."""

    accelerators: frozenset[str]  # keys of the accelerator catalogue
    part_names: tuple[tuple[str, str], ...] = ()  # the catalogue's (part-name pattern, key): config.part_names
    peaks: tuple[tuple[str, float], ...] = ()  # the catalogue's peaks, config.peak_table's items: named in caveats
    limit: int | None = None  # import only the first N jobs (pods, runs, traces) of the source
    accelerator: str | None = None
    chips: int | None = None
    cluster: str | None = None
    start_us: int | None = None
    max_expanded_bytes: int = DEFAULT_MAX_EXPANDED_BYTES  # what one file (or line) may hold, decompressed
    job: str | None = None  # the job id, for a source that names none (logs, orbax)
    submit_us: int | None = None  # logs: when the job was submitted (the log starts later)
    profile: str | None = None  # logs: the log profile's name
    profiles: Path | None = None  # logs: a YAML file of profiles added to the built-in ones
    accelerator_labels: str | None = None  # kubernetes: a YAML of label values → catalogue keys to add
    timezone: str | None = None  # slurm: the zone sacct printed its times in (None: UTC)
    accelerator_map: object = None  # slurm: an AcceleratorMap (GRES type / partition → catalogue key)


@dataclass(frozen=True)
class Rejection:
    file: str  # the source file, relative to SOURCE
    where: str  # line or record that held it
    item: str  # the job, pod or entry it concerns
    reason: str  # generic, so rejections group by it
    detail: str = ""

    def row(self) -> dict:
        return {"file": self.file, "where": self.where, "item": self.item, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class Caveat:
    """Something imported whose figures the source leaves partly unknown or assumed
    (a run that died, steps no count gives): said per item, not silently."""

    file: str
    item: str
    caveat: str  # generic, so caveats group by it
    detail: str = ""

    def row(self) -> dict:
        return {"file": self.file, "item": self.item, "caveat": self.caveat, "detail": self.detail}


@dataclass
class Imported:
    importer: str
    # Each stream's records, held compactly (fleet_goodput/importers/records.py): used as lists of dicts.
    streams: dict[str, Records] = field(default_factory=lambda: {stream: Records(stream) for stream in schemas.STREAMS})
    rejections: list[Rejection] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)  # written to SOURCE.json beside the counts
    # What the source observed of each cluster, {cluster: (from_us, to_us)}: None for a finished history,
    # whose period runs from its first record to its last (`history_periods`); a live source sets it.
    observed: dict[str, tuple[int, int]] | None = None
    # Queue quota levels the scheduler files state (fleet_goodput/telemetry/queue_quotas.py): Kueue's.
    queue_quotas: list[dict] = field(default_factory=list)

    def periods(self) -> dict[str, tuple[int, int]] | None:
        """What the import's scheduler files state it observed (fleet_goodput/telemetry/observed.py)."""
        return self.observed if self.observed is not None else history_periods(self.streams)

    def reject(self, file: str, where: str, item: str, reason: str, detail: str = "") -> None:
        self.rejections.append(Rejection(file, where, item, reason, detail))

    def caveat(self, file: str, item: str, caveat: str, detail: str = "") -> None:
        self.caveats.append(Caveat(file, item, caveat, detail))


class JobEmitter:
    """Records of one job, with event ids that depend only on the job and the order of emission.

    Ids are `{prefix}/{job_id}/{s|r|p}{n:05d}`: zero-padded so that two
    scheduler events of one job at the same instant (a PREEMPT then an
    ALLOCATE) are applied in the order they were emitted.
    """

    def __init__(self, imported: Imported, prefix: str, job_id: str, cluster: str, accelerator: str):
        self.imported, self.prefix, self.job_id = imported, prefix, job_id
        self.cluster, self.accelerator = cluster, accelerator
        self._counts = Counter()

    def _id(self, letter: str) -> str:
        self._counts[letter] += 1
        return f"{self.prefix}/{self.job_id}/{letter}{self._counts[letter]:05d}"

    def scheduler(self, type_: str, time_us: int, chips: int, **submit) -> None:
        record = {
            "event_id": self._id("s"),
            "event_time": int(time_us),
            "job_id": self.job_id,
            "type": type_,
            "cluster": self.cluster,
            "accelerator": self.accelerator,
            "chips": int(chips),
            "workload": None,
            "framework": None,
            "team": None,
            "topology": None,
            "priority": None,
        }
        record.update(submit)
        self.imported.streams["scheduler"].append(record)

    def runtime(self, type_: str, time_us: int, step: int | None = None, attempt: int | None = None) -> None:
        self.imported.streams["runtime"].append(
            {
                "event_id": self._id("r"),
                "event_time": int(time_us),
                "job_id": self.job_id,
                "type": type_,
                "step": step,
                "attempt": attempt,
            }
        )

    def span(
        self,
        kind: str,
        start_us: int,
        end_us: int | None,
        start_step: int | None = None,
        end_step: int | None = None,
        attempt: int | None = None,
    ) -> None:
        """`kind`_START at start_us and, unless end_us is None (never ended), `kind`_END at end_us."""
        self.runtime(f"{kind}_START", start_us, start_step, attempt)
        if end_us is not None:
            self.runtime(f"{kind}_END", end_us, end_step, attempt)

    def profile(
        self,
        time_us: int,
        step: int,
        duration_s: float,
        chips: int,
        ideal_flops: float,
        flops_source: str,
        precision: str | None = None,
    ) -> None:
        """A profiler sample; `precision` None means bf16 (the source does not say otherwise)."""
        self.imported.streams["profiler"].append(
            {
                "event_id": self._id("p"),
                "event_time": int(time_us),
                "job_id": self.job_id,
                "step": int(step),
                "duration_s": float(duration_s),
                "chips": int(chips),
                "ideal_flops": float(ideal_flops),
                "flops_source": flops_source,
                "bytes_accessed": None,
                "precision": precision,
            }
        )


def assumed_peak(options: Options, accelerator: str) -> str:
    """The caveat's detail for a PG measured against the bf16 peak because the source states no
    precision: which peak that is, and what PG would be against the faster ones the part has."""
    peaks = dict(options.peaks)
    if accelerator not in peaks:
        return f"PG measured against the {accelerator} bf16 peak"
    bf16 = peaks[accelerator]
    faster = [
        (precision, peaks[f"{accelerator}/{precision}"])
        for precision in ("fp8", "fp4")
        if f"{accelerator}/{precision}" in peaks
    ]
    return f"PG measured against the {accelerator} bf16 peak, {bf16 / 1e12:,.0f} TFLOP/s per chip" + "".join(
        f"; had it trained in {precision} ({peak / 1e12:,.0f} TFLOP/s), PG would be {bf16 / peak:.2g} x as high"
        for precision, peak in faster
    )


def capacity(imported: Imported, prefix: str, cluster: str, accelerator: str, time_us: int, chips: int) -> None:
    """A CAPACITY level (chips online from `time_us` on) for one cluster and accelerator."""
    imported.streams["scheduler"].append(
        {
            "event_id": f"{prefix}/capacity/{cluster}/{accelerator}/{time_us}",
            "event_time": int(time_us),
            "job_id": None,
            "type": "CAPACITY",
            "cluster": cluster,
            "accelerator": accelerator,
            "chips": int(chips),
            "workload": None,
            "framework": None,
            "team": None,
            "topology": None,
            "priority": None,
        }
    )


def history_periods(streams: dict[str, list[dict]]) -> dict[str, tuple[int, int]] | None:
    """What a finished history observed of each cluster: from the cluster's first record (of any stream;
    a job's runtime and profiler records count toward its SUBMIT's cluster) to the history's last record.
    A history is read whole, so every cluster in it is known up to its end: a cluster whose records stop
    earlier was quiet, not unobserved (one whose run ended first must not hold the others back). None
    where no scheduler record names a cluster."""
    cluster_of = {r["job_id"]: r["cluster"] for r in streams.get("scheduler", []) if r["type"] == "SUBMIT"}
    first: dict[str, int] = {}
    last = None
    for stream, records in streams.items():
        for record in records:
            time_us = micros_of(record["event_time"])
            last = time_us if last is None else max(last, time_us)
            cluster = record["cluster"] if stream == "scheduler" else cluster_of.get(record["job_id"])
            if cluster is not None:
                first[cluster] = min(first.get(cluster, time_us), time_us)
    return {cluster: (start, last) for cluster, start in sorted(first.items())} or None
