"""A file delivered again in place with other content is refused, with the way to apply it.

A run knows the input files earlier runs applied by their content (fleet_goodput/runs/batch.py,
`list_input`). A file under a path an earlier run applied whose content now differs (a corrected
file delivered again in place, of the same size or not) cannot replace what its first delivery
added: the store keeps figures and the state of open jobs, not the events each file brought, and
a job settled long ago keeps none at all. Reading it as a new file would add its events to the
first delivery's (a corrected job id becomes a second job, and the wrong one stays). So the run
stops before it computes anything, naming the file and the run that applied it, and says what
gives exact figures: roll the store back to the run before that one (`mpg rollback`), whose later
files the next run then reads again with the correction in place, as one clean run would have.
A file that holds other events under a path used before is delivered under a name of its own.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.runs_table import RunRecord


class ChangedInPlace(ValueError):
    """An input file applied before holds other content now (exit 2: the input is what is wrong)."""


def refuse_changed_in_place(
    store: Store, previous: RunRecord | None, new_files: Iterable, applied: dict[tuple, str]
) -> None:
    """ChangedInPlace if any of `new_files` (InputFile: not applied by content) sits under a path an
    earlier run applied with other content (`applied`: Store.applied_files); nothing otherwise."""
    paths = {path for path, _, _ in applied}
    candidates = [item for item in new_files if item.path in paths]
    if previous is None or not candidates:
        return
    by_path: dict[str, tuple[int, str]] = {}  # path -> (run, content) of the latest run that applied a file there
    for row in store.read("state_files", previous).select(["path", "run_id", "sha256"]).to_pylist():
        if row["path"] not in by_path or row["run_id"] >= by_path[row["path"]][0]:
            by_path[row["path"]] = (row["run_id"], row["sha256"])
    changed = [(item.path, by_path[item.path][0]) for item in candidates if by_path[item.path][1] != item.sha256]
    if not changed:
        return
    path, run_id = min(changed, key=lambda pair: pair[1])
    others = f" (and {len(changed) - 1} other file(s) so)" if len(changed) > 1 else ""
    output = shlex.quote(store.root)
    undo = (
        f"undo run {run_id} and the runs after it (mpg rollback --output {output} --to {run_id - 1}), then run again"
        if run_id > 1
        else f"start the output afresh over every input (mpg run --replace --input DIR --output {output})"
    )
    raise ChangedInPlace(
        f"{path} holds other content than when run {run_id} applied it{others}: a file delivered again in place "
        "cannot replace what its first delivery added, so nothing was committed. If it corrects that file, "
        f"{undo}: the runs that follow read it as one clean run would. If it holds other events, give it a name "
        "of its own."
    )
