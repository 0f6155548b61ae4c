"""Beam inspects each DoFn object's methods once (pipelines/dofn_specs.py), with Beam's own answers."""

from __future__ import annotations

import gc

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate

from fleet_goodput.core.config import load_settings
from fleet_goodput.core.stream_settings import StreamSettings
from fleet_goodput.pipelines import dofn_specs
from fleet_goodput.pipelines.goodput import key_rules
from fleet_goodput.transforms.stream_sessionize import _StreamTimelineFn


class _Doubled(beam.DoFn):
    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        yield element * 2


class _TwoTimestamps(beam.DoFn):
    def process(self, element, first=beam.DoFn.TimestampParam, second=beam.DoFn.TimestampParam):
        yield element


BEAMS = dofn_specs._inspect  # Beam's own, as the module found it


@pytest.fixture
def remembered(monkeypatch):
    """`remember_dofn_specs` for one test (Beam's own function put back after it); Beam's inspection, counted."""
    inspected = []
    monkeypatch.setattr(userstate, "get_dofn_specs", userstate.get_dofn_specs)
    monkeypatch.setattr(dofn_specs, "_inspect", lambda dofn: inspected.append(dofn) or BEAMS(dofn))
    dofn_specs.remember_dofn_specs()
    return inspected


def test_the_specs_are_beams_and_each_object_is_inspected_once(remembered):
    stateful, plain = _StreamTimelineFn(key_rules(load_settings(), StreamSettings())), _Doubled()
    for dofn in (stateful, plain, stateful, plain):
        assert userstate.get_dofn_specs(dofn) == BEAMS(dofn)
    assert userstate.is_stateful_dofn(stateful) and not userstate.is_stateful_dofn(plain)
    assert remembered == [stateful, plain]
    state, timers = userstate.get_dofn_specs(stateful)
    state.clear()  # a caller's sets are its own: the next caller still gets every spec
    assert userstate.get_dofn_specs(stateful)[0] == BEAMS(stateful)[0] and timers


def test_a_dofn_is_forgotten_with_its_object_and_a_mistake_is_raised_at_every_look(remembered):
    plain = _Doubled()
    userstate.get_dofn_specs(plain)
    assert id(plain) in dofn_specs._known
    key = id(plain)
    remembered.clear()
    del plain  # its last reference
    gc.collect()
    assert key not in dofn_specs._known
    mistaken = _TwoTimestamps()
    for _ in range(2):
        with pytest.raises(ValueError, match="duplicate"):
            userstate.get_dofn_specs(mistaken)
    assert remembered.count(mistaken) == 2


def test_a_pipeline_runs_as_before(remembered):
    with beam.Pipeline(runner="FnApiRunner") as p:
        assert_that(p | beam.Create([1, 2, 3]) | beam.ParDo(_Doubled()) | beam.Map(lambda x: x + 1),
                    equal_to([3, 5, 7]))
    assert remembered  # the pipeline's DoFns were inspected through it
