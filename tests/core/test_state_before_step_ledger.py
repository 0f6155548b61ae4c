"""A key's state saved before the step ledger moved out of core/timeline.py keeps going.

tests/data/state-before-step-ledger/key-state.pickle is one job's key state as fleet-goodput at
commit 1c707bc saved it (write.sh there writes it again): its timeline holds a step span open, closed
spans awaiting a checkpoint, one applied one by one (a `StepSpan`) and a STEP_RUN's (a `StepRun`),
and productive step time awaiting a first profiler sample, each class named by the module it lived
in then. continued.json holds what that commit's code reported continuing it to the job's end;
today's code must report the same.
"""

from __future__ import annotations

import json
from pathlib import Path

from fleet_goodput.core.figure_vector import FIGURES
from fleet_goodput.core.session import state_from_bytes
from fleet_goodput.core.step_ledger import StepRun, StepSpan

SAVED = Path(__file__).parents[1] / "data" / "state-before-step-ledger"
T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z, as write.py's


def _saved_blob() -> bytes:
    return (SAVED / "key-state.pickle").read_bytes()


def test_the_saved_state_names_the_step_spans_by_the_module_of_then():
    blob = _saved_blob()
    assert b"fleet_goodput.core.timeline" in blob and b"step_ledger" not in blob
    ledger = state_from_bytes(blob).timeline.ledger
    assert {type(span) for span in ledger.unresolved} == {StepRun, StepSpan}
    assert ledger.open_step is not None and ledger.productive
    assert (ledger.durable_step, ledger.counted_step, ledger.reported_step) == (6, 6, 12)


def test_continuing_it_gives_the_figures_it_gave_then():
    expected = json.loads((SAVED / "continued.json").read_text())
    state = state_from_bytes(_saved_blob())
    advance = state.advance(T0 + 400_000_000, T0 + 400_000_000)
    windows = {
        str(window): dict(zip((*FIGURES, "ideal"), figures)) for window, figures in sorted(advance.windows.items())
    }
    assert windows == expected["windows"]
    assert json.loads(json.dumps(advance.summary)) == expected["summary"]
    assert {"/".join(outcome): n for outcome, n in advance.settled_counts.items()} == expected["settled_counts"]
    assert state.timeline.end_us is not None and not state.timeline.ledger.awaiting()
