"""`mpg import orbax`: checkpoints written here by the real orbax-checkpoint package (on jax[cpu]),
their saves checked against `_CHECKPOINT_METADATA` read with `json` alone, then through `mpg run`.

JAX and Orbax are imported where a test uses them, not at the top: collecting the suite would load them
in every worker (about 1 CPU s each)."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from fleet_goodput.cli import main
from fleet_goodput.importers import IMPORTERS
from fleet_goodput.store.views import connect
from fleet_goodput.telemetry.recorder import Recorder
from job_streams import micros, read_stream, write_job_scheduler
from importing import import_to, options, rejected_rows, tree_bytes

JOB, CHIPS = "llama-7b-ckpt", 8
METADATA = "_CHECKPOINT_METADATA"

pytestmark = (
    pytest.mark.slow
)  # checkpoints written by Orbax and two mpg runs, about 20 s: scheduled first (tests/conftest.py)


def _start_save_and_stop(directory, step: int) -> None:
    """What a save leaves when the job stops (or is looked at) before it commits: Orbax's own first
    stage of a save, the temporary folder with the metadata holding its start time only."""
    from etils import epath
    from orbax.checkpoint._src.metadata import checkpoint as checkpoint_metadata
    from orbax.checkpoint._src.path import atomicity

    store = checkpoint_metadata.metadata_store(enable_write=True)
    temporary = atomicity.AtomicRenameTemporaryPath.from_final(
        epath.Path(directory) / str(step), checkpoint_metadata_store=store
    )
    asyncio.run(temporary.create())
    store.wait_until_finished()


def _save(manager, step: int) -> None:
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    manager.save(step, args=ocp.args.StandardSave({"w": jnp.full(4, float(step))}))
    manager.wait_until_finished()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A job's checkpoint folder over two runs: the first saves 10 and 20 and dies while saving 25;
    the restart restores 20, saves 30 and is saving 40 at import. Step 35 has a garbled metadata file,
    step 36 none (damaged by hand: Orbax writes neither)."""
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    root = tmp_path_factory.mktemp("orbax") / "checkpoints"
    first = ocp.CheckpointManager(root)
    for step in (10, 20):
        _save(first, step)
    first.close()
    _start_save_and_stop(root, 25)
    restarted = ocp.CheckpointManager(root)
    restarted.restore(restarted.latest_step(), args=ocp.args.StandardRestore({"w": jnp.zeros(4)}))
    _save(restarted, 30)
    restarted.close()
    _start_save_and_stop(root, 40)
    shutil.copytree(root / "30", root / "35")
    (root / "35" / METADATA).write_text('{"init_timestamp_nsecs": 17956')
    shutil.copytree(root / "30", root / "36")
    (root / "36" / METADATA).unlink()
    return root


def _metadata(folder) -> dict:
    return json.loads((folder / METADATA).read_text())


def test_each_committed_save_is_a_span_with_orbax_times(checkpoints, tmp_path):
    imported, summary = import_to("orbax", checkpoints, tmp_path / "in", job=JOB)
    expected = []
    for step in (10, 20, 30):
        metadata = _metadata(checkpoints / str(step))
        expected += [
            ("CHECKPOINT_SAVE_START", metadata["init_timestamp_nsecs"] // 1000, step),
            ("CHECKPOINT_SAVE_END", metadata["commit_timestamp_nsecs"] // 1000, step),
        ]
    in_progress = _metadata(checkpoints / "40.orbax-checkpoint-tmp")
    assert in_progress["commit_timestamp_nsecs"] is None
    expected.append(("CHECKPOINT_SAVE_START", in_progress["init_timestamp_nsecs"] // 1000, 40))
    assert [(r["type"], r["event_time"], r["step"]) for r in imported.streams["runtime"]] == expected
    assert {r["job_id"] for r in imported.streams["runtime"]} == {JOB}
    assert summary["events"] == {"scheduler": 0, "runtime": 7, "profiler": 0} and summary["jobs"] == 1
    assert summary["caveats"] == {"save in progress: no commit time yet": 1}
    assert sorted((row["file"], row["reason"]) for row in rejected_rows(tmp_path / "in")) == [
        ("25.orbax-checkpoint-tmp", "save abandoned: a later save began, no commit time"),
        ("35", f"{METADATA} is not JSON"),
        ("36", f"no {METADATA}"),
    ]


def test_same_folder_gives_byte_identical_output(checkpoints, tmp_path):
    import_to("orbax", checkpoints, tmp_path / "first", job=JOB)
    import_to("orbax", checkpoints, tmp_path / "second", job=JOB)
    assert tree_bytes(tmp_path / "first") == tree_bytes(tmp_path / "second")


def test_reimport_after_the_save_commits_keeps_the_ids(checkpoints, tmp_path):
    """The save in progress commits later: the next import gives its START the same id (mpg run drops the
    repeat) and adds its END."""
    import orbax.checkpoint as ocp

    grown = tmp_path / "checkpoints"
    shutil.copytree(checkpoints, grown)
    manager = ocp.CheckpointManager(grown)
    _save(manager, 50)
    manager.close()
    before, _ = import_to("orbax", checkpoints, tmp_path / "before", job=JOB)
    after, _ = import_to("orbax", grown, tmp_path / "after", job=JOB)
    ids_before = {r["event_id"] for r in before.streams["runtime"]}
    ids_after = {r["event_id"] for r in after.streams["runtime"]}
    started_40 = next(r["event_id"] for r in before.streams["runtime"] if r["step"] == 40)
    assert ids_before - {started_40} <= ids_after  # 40 is abandoned now: a later save (50) began
    assert [r["type"] for r in after.streams["runtime"] if r["step"] == 50] == [
        "CHECKPOINT_SAVE_START",
        "CHECKPOINT_SAVE_END",
    ]


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda m: m.pop("init_timestamp_nsecs"), "no init_timestamp_nsecs: the save's start is unknown"),
        (
            lambda m: m.update(init_timestamp_nsecs="1795667569243960921"),
            "init_timestamp_nsecs is not a whole number of nanoseconds",
        ),
        (
            lambda m: m.update(commit_timestamp_nsecs=1.5e18),
            "commit_timestamp_nsecs is not a whole number of nanoseconds",
        ),
        (
            lambda m: m.update(commit_timestamp_nsecs=m["init_timestamp_nsecs"] - 1000),
            "commit_timestamp_nsecs before init_timestamp_nsecs",
        ),
        (lambda m: m.update(init_timestamp_nsecs=-5), "init_timestamp_nsecs is not a time from 1970 up to 2100"),
        (
            lambda m: m.update(commit_timestamp_nsecs=10**30),
            "commit_timestamp_nsecs is not a time from 1970 up to 2100",
        ),
    ],
)
def test_metadata_orbax_would_not_write_is_rejected_with_its_reason(checkpoints, tmp_path, edit, reason):
    folder = tmp_path / "checkpoints"
    shutil.copytree(checkpoints / "10", folder / "10")
    shutil.copytree(checkpoints / "20", folder / "20")
    metadata = _metadata(folder / "20")
    edit(metadata)
    (folder / "20" / METADATA).write_text(json.dumps(metadata))
    imported, _ = import_to("orbax", folder, tmp_path / "in", job=JOB)
    assert [(row["file"], row["reason"]) for row in rejected_rows(tmp_path / "in")] == [("20", reason)]
    assert {r["step"] for r in imported.streams["runtime"]} == {10}


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"[1, 2]", f"{METADATA} is not a JSON object"),
        (b"\xff\xfe{}", f"{METADATA} is not JSON"),
        (b" " * (16 << 20) + b"{}", f"{METADATA} larger than 16 MiB"),  # read no further than the limit
    ],
)
def test_metadata_that_is_no_json_object_is_rejected(checkpoints, tmp_path, content, reason):
    folder = tmp_path / "checkpoints"
    shutil.copytree(checkpoints / "10", folder / "10")
    (folder / "10" / METADATA).write_bytes(content)
    imported = IMPORTERS["orbax"].read(folder, options(job=JOB))
    assert [(r.file, r.reason) for r in imported.rejections] == [("10", reason)]


def test_one_step_folder_imports_alone(checkpoints, tmp_path):
    imported, _ = import_to("orbax", checkpoints / "20", tmp_path / "in", job=JOB)
    metadata = _metadata(checkpoints / "20")
    assert [(r["event_time"], r["step"]) for r in imported.streams["runtime"]] == [
        (metadata["init_timestamp_nsecs"] // 1000, 20),
        (metadata["commit_timestamp_nsecs"] // 1000, 20),
    ]


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "pass --job ID"),
        (["--job", JOB, "--accelerator", "tpu-v5e", "--chips", "8"], "--accelerator and --chips are not used"),
    ],
)
def test_cli_says_which_flags_a_checkpoint_folder_needs(checkpoints, tmp_path, capsys, flags, message):
    assert main(["import", "orbax", str(checkpoints), "--out", str(tmp_path / "in"), *flags]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "in").exists()


def test_a_folder_of_nothing_but_damaged_steps_imports_nothing(checkpoints, tmp_path, capsys):
    damaged = tmp_path / "damaged"
    shutil.copytree(checkpoints / "35", damaged / "35")
    assert main(["import", "orbax", str(damaged), "--out", str(tmp_path / "in"), "--job", JOB]) == 1
    assert f"35 ({METADATA}): {METADATA} is not JSON" in capsys.readouterr().err


def test_checkpoint_saves_through_mpg_run_with_the_jobs_scheduler_stream(checkpoints, tmp_path, capsys):
    """The import beside the job's scheduler stream (written here as a cluster exporter would): the job's
    checkpoint_save time is the saves' init-to-commit times, the one in progress until the job's FINISH."""
    assert main(["import", "orbax", str(checkpoints), "--out", str(tmp_path / "ckpt"), "--job", JOB]) == 0
    said = capsys.readouterr().out
    assert "No scheduler events" in said and "Next: mpg run" not in said
    committed = [_metadata(checkpoints / str(step)) for step in (10, 20, 30)]
    in_progress_us = _metadata(checkpoints / "40.orbax-checkpoint-tmp")["init_timestamp_nsecs"] // 1000
    submit_us = committed[0]["init_timestamp_nsecs"] // 1000 - 5_000_000
    finish_us = in_progress_us + 2_000_000
    write_job_scheduler(tmp_path / "in", JOB, CHIPS, submit_us, finish_us)
    shutil.copytree(tmp_path / "ckpt" / "runtime", tmp_path / "in" / "runtime")
    assert main(["run", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == 0
    with connect(tmp_path / "out") as connection:
        save_s, lifetime_s = connection.execute(
            "select checkpoint_save_chip_s, lifetime_chip_s from job_goodput where job_id = ?", [JOB]
        ).fetchone()
    saving_us = sum(m["commit_timestamp_nsecs"] // 1000 - m["init_timestamp_nsecs"] // 1000 for m in committed)
    saving_us += finish_us - in_progress_us
    assert save_s == pytest.approx(CHIPS * saving_us / 1e6, abs=1e-6)
    assert lifetime_s == pytest.approx(CHIPS * (finish_us - submit_us) / 1e6, abs=1e-6)
    assert len(read_stream(tmp_path / "in", "runtime")) == 7


def _outside(span: tuple[int, int], holes: list[tuple[int, int]]) -> int:
    """µs of `span` outside the disjoint `holes`."""
    start, end = span
    return (end - start) - sum(max(0, min(end, hole_end) - max(start, hole_start)) for hole_start, hole_end in holes)


def test_a_jax_loop_recorded_and_checkpointed_asynchronously_combines_in_mpg_run(tmp_path):
    """A jitted JAX loop records its steps with the recorder and saves with Orbax in the background; the
    orbax import goes beside the recorder's files and the job's scheduler stream. Steps take precedence over
    a save they overlap (docs/metric.md section 3): checkpoint_save is the saves' time outside every step."""
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    job, telemetry = "jax-loop", tmp_path / "in"

    @jax.jit
    def train_step(weights):
        return weights - 0.1 * jax.grad(lambda w: jnp.sum((w @ w.T - 1.0) ** 2))(weights)

    weights = jnp.full((64, 64), 0.01)
    manager = ocp.CheckpointManager(tmp_path / "checkpoints")  # asynchronous saves, Orbax's default
    with Recorder(telemetry, job, roll_seconds=3600) as recorder:
        for step in range(1, 10):
            with recorder.step(step):
                weights = train_step(weights).block_until_ready()
            if step % 3 == 0:
                manager.save(step, args=ocp.args.StandardSave({"w": weights}))
        manager.wait_until_finished()
        manager.close()
    assert main(["import", "orbax", str(tmp_path / "checkpoints"), "--out", str(tmp_path / "ckpt"), "--job", job]) == 0
    shutil.copytree(tmp_path / "ckpt" / "runtime", telemetry / "runtime", dirs_exist_ok=True)

    steps = [(micros(a), micros(b)) for a, b in _pairs(read_stream(telemetry, "runtime"), "STEP")]
    saves = [
        (_metadata(path)["init_timestamp_nsecs"] // 1000, _metadata(path)["commit_timestamp_nsecs"] // 1000)
        for path in sorted((tmp_path / "checkpoints").iterdir())
    ]
    assert len(steps) == 9 and len(saves) == 3
    submit_us, finish_us = steps[0][0] - 1_000_000, max(saves[-1][1], steps[-1][1]) + 1_000_000
    write_job_scheduler(telemetry, job, CHIPS, submit_us, finish_us)
    assert main(["run", "--input", str(telemetry), "--output", str(tmp_path / "out")]) == 0
    with connect(tmp_path / "out") as connection:
        productive_s, save_s, idle_s = connection.execute(
            "select productive_chip_s, checkpoint_save_chip_s, idle_chip_s from job_goodput where job_id = ?", [job]
        ).fetchone()
    stepping_us = sum(end - start for start, end in steps)
    saving_us = sum(_outside(save, steps) for save in saves)
    assert productive_s == pytest.approx(CHIPS * stepping_us / 1e6, abs=1e-6)
    assert save_s == pytest.approx(CHIPS * saving_us / 1e6, abs=1e-6)
    assert idle_s == pytest.approx(CHIPS * (finish_us - submit_us - stepping_us - saving_us) / 1e6, abs=1e-6)


def _pairs(records: list[dict], kind: str) -> list[tuple[dict, dict]]:
    edges = [r for r in records if r["type"].startswith(f"{kind}_")]
    return list(zip(edges[::2], edges[1::2]))


def test_a_step_folder_past_the_largest_step_is_rejected_and_the_others_imported(checkpoints, tmp_path):
    """A step folder named 2^70 (copied from a real save, the name changed): a step is an Avro long, so it is one
    rejection with its reason, where the write of the whole import once failed on it."""
    folder = tmp_path / "checkpoints"
    shutil.copytree(checkpoints / "10", folder / "10")
    shutil.copytree(checkpoints / "20", folder / str(2**70))
    imported, _ = import_to("orbax", folder, tmp_path / "in", job=JOB)
    assert [(row["file"], row["reason"]) for row in rejected_rows(tmp_path / "in")] == [
        (str(2**70), "the folder's step is past the largest the runtime schema holds (9,223,372,036,854,775,807)")
    ]
    assert {r["step"] for r in imported.streams["runtime"]} == {10}
