"""Orbax checkpoint folders → CHECKPOINT_SAVE spans with the exact times Orbax recorded.

SOURCE is the folder an Orbax `CheckpointManager` writes into (or one step's
folder of it). Each step is a sub-folder named by its step (`1200`,
`00001200` with a fixed length, `ckpt_1200` with a prefix) holding
`_CHECKPOINT_METADATA`, a JSON object in which Orbax records
`init_timestamp_nsecs` (the save began) and `commit_timestamp_nsecs` (the
checkpoint was finalized: durable). Mapping, per step folder:

    CHECKPOINT_SAVE_START at init_timestamp_nsecs (ns → µs, rounded down)
    CHECKPOINT_SAVE_END   at commit_timestamp_nsecs, durable step = the folder's step

A save still being written (a `<step>.orbax-checkpoint-tmp-…` folder, or a
metadata file without a commit time) gives its START alone when no later save
began: the job is saving now, and the next import adds its END (event ids come
from the step and the start time, so re-importing a growing folder gives the
same ids for the same saves and `mpg run` drops the repeats). One that a later
save followed was abandoned (the job died while saving): its end is unknown and
it is rejected with that reason. Steps saved by several runs of the job (a
restart resumes from a checkpoint and saves on) are simply more saves of the
folder, in time order.

The folder holds saves only: no scheduler events and no steps. It is meant to
be combined with the job's other streams under the same `--job` id (its
scheduler stream from the cluster, its steps from the recorder or its logs);
imported alone, `mpg run` rejects every event ("no SUBMIT for this job").
Checkpoints that Orbax already deleted (`max_to_keep`) are gone from the
folder: import it regularly, the repeats cost nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from fleet_goodput.importers.common import Imported, Options, SourceError, Unmappable
from fleet_goodput.importers.reading import decode_json, event_time_us, file_digest

NAME = "orbax"
HELP = "Orbax checkpoint folder (_CHECKPOINT_METADATA of each step) → CHECKPOINT_SAVE runtime events"
PREFIX = "orbax"
METADATA_FILE = "_CHECKPOINT_METADATA"
MAX_STEP = 2**63 - 1  # a step is an Avro long
# `<prefix>_<step>` or `<step>` (zero-padded with a fixed length), and Orbax's temporary suffix while saving.
STEP_FOLDER = re.compile(r"^(?:.*_)?(?P<step>\d+)(?P<tmp>\.orbax-checkpoint-tmp.*)?$")
NANOS_PER_MICRO = 1_000
# A metadata file holds a few kB (item handlers, metrics, custom); more is not Orbax's.
MAX_METADATA_BYTES = 16 << 20

PROVENANCE = {
    "source": "Orbax checkpoint folders (google/orbax, orbax-checkpoint): the step-level _CHECKPOINT_METADATA",
    "licence": "as the user's own checkpoints",
    "mapping": [
        "init_timestamp_nsecs -> CHECKPOINT_SAVE_START; commit_timestamp_nsecs -> CHECKPOINT_SAVE_END, "
        "durable step = the step folder's number",
        "a save still being written (temporary folder or no commit time) and followed by no later save: "
        "CHECKPOINT_SAVE_START alone",
    ],
    "cannot_tell": [
        "the job's scheduler events, steps and profile: combine with the job's other streams under the same job id",
        "saves Orbax already deleted (max_to_keep): import the folder regularly",
        "which run of the job (attempt) saved a step",
        "asynchronous saves: init to commit spans the background write, during which training may run; "
        "in the timeline steps take precedence over a save they overlap",
    ],
}


def _nanos(metadata: dict, key: str) -> int | None:
    value = metadata.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unmappable(f"{key} is not a whole number of nanoseconds", repr(value)[:80])
    return event_time_us(value // NANOS_PER_MICRO, key)


def _read_metadata(folder: Path) -> dict:
    path = folder / METADATA_FILE
    if not path.is_file():
        raise Unmappable(f"no {METADATA_FILE}", "not an Orbax step folder, or written by an Orbax older than 0.5")
    with open(path, "rb") as handle:
        data = handle.read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise Unmappable(f"{METADATA_FILE} larger than {MAX_METADATA_BYTES >> 20} MiB")
    try:
        metadata = decode_json(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Unmappable(f"{METADATA_FILE} is not JSON", str(exc)[:120]) from None
    if not isinstance(metadata, dict):
        raise Unmappable(f"{METADATA_FILE} is not a JSON object", type(metadata).__name__)
    return metadata


def _step_folders(source: Path) -> list[tuple[Path, re.Match]]:
    if not source.is_dir():
        raise SourceError(source, None, "no such folder: expected an Orbax checkpoint folder")
    match = STEP_FOLDER.match(source.name)
    if match and (source / METADATA_FILE).exists():
        return [(source, match)]  # one step's folder
    return [
        (path, STEP_FOLDER.match(path.name))
        for path in sorted(source.iterdir())
        if path.is_dir() and not path.name.startswith(".")
    ]


def read(source: Path, options: Options) -> Imported:
    if not options.job:
        raise SourceError(
            source,
            None,
            "a checkpoint folder does not name its job: pass --job ID (the job id of its scheduler stream)",
        )
    if options.accelerator or options.chips:
        raise SourceError(
            source,
            None,
            "--accelerator and --chips are not used: checkpoint saves are runtime events, "
            "which carry neither; the job's scheduler stream gives them",
        )
    imported = Imported(NAME)
    saves = []  # (start µs, step, end µs or None, step folder)
    for folder, match in _step_folders(source):
        if match is None:
            imported.reject(
                folder.name,
                "folder",
                options.job,
                "not a step folder",
                "an Orbax step folder is named by its step number",
            )
            continue
        try:
            if int(match["step"]) > MAX_STEP:
                raise Unmappable(
                    f"the folder's step is past the largest the runtime schema holds ({MAX_STEP:,})", match["step"][:40]
                )
            metadata = _read_metadata(folder)
            start = _nanos(metadata, "init_timestamp_nsecs")
            end = _nanos(metadata, "commit_timestamp_nsecs")
            if start is None:
                raise Unmappable("no init_timestamp_nsecs: the save's start is unknown")
            if end is not None and end < start:
                raise Unmappable(
                    "commit_timestamp_nsecs before init_timestamp_nsecs",
                    f"{metadata['commit_timestamp_nsecs']} < {metadata['init_timestamp_nsecs']}",
                )
        except Unmappable as exc:
            imported.reject(folder.name, METADATA_FILE, options.job, exc.reason, exc.detail)
            continue
        saves.append((start, int(match["step"]), None if match["tmp"] else end, folder))
    latest_start = max((start for start, *_ in saves), default=None)
    runtime = imported.streams["runtime"]
    for start, step, end, folder in sorted(saves, key=lambda save: (save[0], save[1], save[3].name)):
        name = folder.name
        if end is None and start != latest_start:
            imported.reject(
                name,
                METADATA_FILE,
                options.job,
                "save abandoned: a later save began, no commit time",
                "the job stopped while saving; its end is unknown",
            )
            continue
        key = f"{PREFIX}/{options.job}/{step}/{start}"
        runtime.append(_event(f"{key}/start", start, options.job, "CHECKPOINT_SAVE_START", step))
        if end is None:
            imported.caveat(
                name,
                options.job,
                "save in progress: no commit time yet",
                "its START alone; a later import of the folder adds its END",
            )
        else:
            runtime.append(_event(f"{key}/end", end, options.job, "CHECKPOINT_SAVE_END", step))
    imported.provenance = {
        **PROVENANCE,
        "job": options.job,
        "inputs": [
            file_digest(folder / METADATA_FILE) | {"file": f"{folder.name}/{METADATA_FILE}"}
            for *_, folder in sorted(saves, key=lambda save: save[3].name)
        ],
    }
    return imported


def _event(event_id: str, time_us: int, job_id: str, type_: str, step: int) -> dict:
    return {"event_id": event_id, "event_time": time_us, "job_id": job_id, "type": type_, "step": step, "attempt": None}
