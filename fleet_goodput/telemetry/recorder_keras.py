"""A Keras 3 callback that records a `model.fit` run's steps (and, given its FLOPs, profiles).

    from fleet_goodput.telemetry.recorder import Recorder
    from fleet_goodput.telemetry.recorder_keras import RecordSteps

    recorder = Recorder("/data/telemetry", job_id="vit-b16-0412")
    model.fit(data, epochs=3, callbacks=[RecordSteps(recorder, ideal_flops_per_step=6 * params * batch * tokens,
                                                     chips=8, profile_every=100)])

Every training batch is a STEP span numbered by the optimizer's iteration
count (step k is the k-th update; a run resumed from a checkpoint continues
its numbering, so steps it redoes are counted `lost`, not productive twice).
With `ideal_flops_per_step` and `chips`, every `profile_every`-th step also
gives an ANALYTIC profiler sample of the measured step time. Keras calls the
batch callbacks once per `steps_per_execution` batches: a span then covers
that many steps. Works on every Keras backend (JAX, TensorFlow, PyTorch);
the tests run it on JAX on CPU. Keras is imported here only, never by
`fleet_goodput.telemetry.recorder`.
"""

from __future__ import annotations

import time

import keras

from fleet_goodput.telemetry.recorder import Recorder


class RecordSteps(keras.callbacks.Callback):
    def __init__(
        self,
        recorder: Recorder,
        *,
        ideal_flops_per_step: float | None = None,
        chips: int | None = None,
        profile_every: int = 100,
        precision: str | None = None,
    ):
        super().__init__()
        if (ideal_flops_per_step is None) != (chips is None):
            raise ValueError("profiles need both ideal_flops_per_step and chips")
        if profile_every <= 0:
            raise ValueError("profile_every must be positive")
        self.recorder, self.ideal_flops_per_step, self.chips = recorder, ideal_flops_per_step, chips
        self.profile_every, self.precision = profile_every, precision
        self._done = 0  # updates the optimizer had made before the current batch
        self._per_batch = 1
        self._started_ns = 0

    def on_train_begin(self, logs=None):
        self._done = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations.value))
        self._per_batch = int(getattr(self.model, "steps_per_execution", 1) or 1)

    def on_train_batch_begin(self, batch, logs=None):
        self._started_ns = time.perf_counter_ns()
        self.recorder.start("STEP", self._done + 1)

    def on_train_batch_end(self, batch, logs=None):
        first, self._done = self._done + 1, self._done + self._per_batch
        self.recorder.end("STEP", self._done)
        every = self.profile_every
        if self.ideal_flops_per_step is not None and self._done // every > (first - 1) // every:  # k·every in the span
            seconds = (time.perf_counter_ns() - self._started_ns) / 1e9 / self._per_batch
            self.recorder.profile(self._done, seconds, self.chips, self.ideal_flops_per_step, precision=self.precision)
