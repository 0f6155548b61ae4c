"""RecordSteps: a real Keras 3 `model.fit` on the JAX backend (CPU) records its steps and profiles.

Keras (and JAX under it) is imported by the tests, not at the top: collecting the suite would load
them in every worker (about 1 CPU s each)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fleet_goodput.telemetry.recorder import Recorder
from job_streams import read_stream

BATCHES_PER_EPOCH, FLOPS = 4, 2.5e6


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported; the test extra installs jax[cpu]
    import keras

    return keras


def test_fit_records_every_batch_as_a_step_numbered_by_the_optimizer(keras, tmp_path):
    from fleet_goodput.telemetry.recorder_keras import RecordSteps

    assert keras.backend.backend() == "jax"
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((8 * BATCHES_PER_EPOCH, 3), "float32"), np.zeros((8 * BATCHES_PER_EPOCH, 2), "float32")
    with Recorder(tmp_path, "keras-fit") as recorder:
        callback = RecordSteps(recorder, ideal_flops_per_step=FLOPS, chips=1, profile_every=3)
        model.fit(x, y, batch_size=8, epochs=2, callbacks=[callback], verbose=0)
        model.fit(x, y, batch_size=8, epochs=1, callbacks=[callback], verbose=0)  # a second fit continues
    steps = [(r["type"], r["step"]) for r in read_stream(tmp_path, "runtime")]
    assert steps == [
        (edge, step) for step in range(1, 3 * BATCHES_PER_EPOCH + 1) for edge in ("STEP_START", "STEP_END")
    ]
    samples = read_stream(tmp_path, "profiler")
    assert [s["step"] for s in samples] == [3, 6, 9, 12]
    assert {(s["chips"], s["ideal_flops"], s["flops_source"]) for s in samples} == {(1, FLOPS, "ANALYTIC")}
    assert all(0 < s["duration_s"] < 60 for s in samples)


def test_profiles_need_both_flops_and_chips(keras, tmp_path):
    from fleet_goodput.telemetry.recorder_keras import RecordSteps

    with (
        Recorder(tmp_path, "keras-fit") as recorder,
        pytest.raises(ValueError, match="both ideal_flops_per_step and chips"),
    ):
        RecordSteps(recorder, ideal_flops_per_step=FLOPS)
