"""Beam's inspection of a DoFn's methods, done once per DoFn object rather than at every look.

Beam asks `userstate.get_dofn_specs` for the state and timer specs a DoFn's
methods declare whenever it looks at the DoFn: twice when a ParDo is made,
four times more as the pipeline becomes its proto and the runner checks it,
and twice when a bundle processor unpickles its own copy. Each call takes an
`inspect.signature` of every method the DoFn has (about 30). A stream's run
of the goodput pipeline (38 ParDos) made 298 calls, about 0.16 of its 0.8 CPU
seconds (docs/performance.md, "`mpg stream` at 2,000×").

The answer depends only on the DoFn's methods and their default arguments,
which are fixed once the object is made, so `remember_dofn_specs` has Beam
keep it per DoFn object for as long as the object lives (a copy Beam
unpickles is another object, inspected once itself). An error (a DoFn with
duplicate parameters) is not kept: it is raised at every look, as by Beam.
"""

from __future__ import annotations

import weakref

from apache_beam.transforms import userstate

_inspect = userstate.get_dofn_specs
_known: dict[int, tuple[frozenset, frozenset]] = {}  # id of a living DoFn → its state and timer specs


def _dofn_specs(dofn) -> tuple[set, set]:
    known = _known.get(id(dofn))
    if known is None:
        states, timers = _inspect(dofn)
        known = frozenset(states), frozenset(timers)
        try:
            weakref.finalize(dofn, _known.pop, id(dofn), None)  # forgotten before its id can be reused
        except TypeError:  # an object without weak references: inspected at every look, as Beam does
            return set(states), set(timers)
        _known[id(dofn)] = known
    return set(known[0]), set(known[1])  # Beam's callers get sets of their own, as from Beam


def remember_dofn_specs() -> None:
    """Make Beam, in this process, inspect each DoFn object's methods once (idempotent)."""
    userstate.get_dofn_specs = _dofn_specs
