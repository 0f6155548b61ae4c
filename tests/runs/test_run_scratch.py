"""A killed run's temporary folders (Beam's `beam-pipeline-temp*` among them) are removed by the next run,
and a living run's never are (fleet_goodput/runs/scratch.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap

from fleet_goodput.runs.scratch import PREFIX, run_scratch

# A run that builds a Beam pipeline inside its scratch folder, says so, then waits to be killed.
HOLDER = textwrap.dedent("""
    import sys, time
    import apache_beam as beam
    from fleet_goodput.runs.scratch import run_scratch
    with run_scratch() as folder:
        pipeline = beam.Pipeline(runner="DirectRunner")
        print(folder, pipeline.local_tempdir, flush=True)
        time.sleep(600)
""")


def _holder(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)}
    )
    folder, beam_temp = process.stdout.readline().split()
    return process, folder, beam_temp


def test_the_next_run_removes_a_killed_runs_folders_and_keeps_a_living_ones(tmp_path, monkeypatch):
    killed, killed_folder, beam_temp = _holder(tmp_path)
    living, living_folder, _ = _holder(tmp_path)
    try:
        assert beam_temp.startswith(killed_folder + "/beam-pipeline-temp"), "Beam's folder is inside the run's"
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        assert os.path.isdir(beam_temp), "SIGKILL leaves it behind"

        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        with run_scratch() as mine:
            assert tempfile.gettempdir() == str(mine) and os.environ["TMPDIR"] == str(mine)
            assert not os.path.exists(killed_folder)
            assert os.path.isdir(living_folder), "a living run's folder is never taken"
        assert not mine.exists() and tempfile.gettempdir() == str(tmp_path)
        assert sorted(p.name.startswith(PREFIX) for p in tmp_path.iterdir()) == [True]
    finally:
        living.kill()
        living.wait()


# Another run's clean-up, over and over: it removes every run folder whose lock no process holds.
REMOVER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from fleet_goodput.runs.scratch import remove_abandoned
    while True:
        remove_abandoned(Path(sys.argv[1]))
""")


def test_a_run_starting_beside_another_runs_clean_up_keeps_its_folder(tmp_path, monkeypatch):
    """Seen under load: a run's folder removed while it ran. The run created its lock file, then locked it,
    and another run's clean-up found the file unlocked in between. 1,500 runs start beside a clean-up that
    never stops (before the fix about 0.65% lost their folder: some ten here); each finds its folder there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    remover = subprocess.Popen([sys.executable, "-c", REMOVER, str(tmp_path)])
    lost = 0
    try:
        for _ in range(1500):
            with run_scratch() as folder:
                lost += not (folder / ".lock").is_file()
            tempfile.tempdir = str(tmp_path)  # as run_scratch leaves it: the process's own
    finally:
        remover.kill()
        remover.wait()
    assert lost == 0
