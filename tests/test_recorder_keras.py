"""RecordSteps: a real Keras 3 `model.fit` on the JAX backend (CPU) records its steps and profiles."""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported; the test extra installs jax[cpu]

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fleet_goodput.telemetry.recorder import Recorder  # noqa: E402
from fleet_goodput.telemetry.recorder_keras import RecordSteps  # noqa: E402
from job_streams import read_stream  # noqa: E402

BATCHES_PER_EPOCH, FLOPS = 4, 2.5e6


def test_fit_records_every_batch_as_a_step_numbered_by_the_optimizer(tmp_path):
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
    assert steps == [(edge, step) for step in range(1, 3 * BATCHES_PER_EPOCH + 1) for edge in ("STEP_START", "STEP_END")]
    samples = read_stream(tmp_path, "profiler")
    assert [s["step"] for s in samples] == [3, 6, 9, 12]
    assert {(s["chips"], s["ideal_flops"], s["flops_source"]) for s in samples} == {(1, FLOPS, "ANALYTIC")}
    assert all(0 < s["duration_s"] < 60 for s in samples)


def test_profiles_need_both_flops_and_chips(tmp_path):
    with Recorder(tmp_path, "keras-fit") as recorder, pytest.raises(ValueError, match="both ideal_flops_per_step and chips"):
        RecordSteps(recorder, ideal_flops_per_step=FLOPS)
