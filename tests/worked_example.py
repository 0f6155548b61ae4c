"""docs/metric.md section 4, the worked example, as events (shared by several tests).

Job j1, TRAINING, 8 chips of tpu-v5e (197 TFLOP/s); times in seconds after T0.
"""

from __future__ import annotations

T0_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
JOB = "j1"
CHIPS = 8

# (seconds after T0, stream, type, fields)
TIMELINE = [
    (0, "scheduler", "SUBMIT", {"chips": 8, "workload": "TRAINING", "team": "research", "framework": "jax"}),
    (100, "scheduler", "ALLOCATE", {"chips": 8}),
    (100, "runtime", "INIT_START", {}),
    (130, "runtime", "INIT_END", {}),
    (130, "runtime", "COMPILE_START", {}),
    (190, "runtime", "COMPILE_END", {}),
    (190, "runtime", "STEP_START", {"step": 1}),
    (240, "profiler", None, {"step": 5}),
    (290, "runtime", "STEP_END", {"step": 10}),
    (290, "runtime", "CHECKPOINT_SAVE_START", {}),
    (300, "runtime", "CHECKPOINT_SAVE_END", {"step": 10}),
    (300, "runtime", "STEP_START", {"step": 11}),
    (360, "runtime", "STEP_END", {"step": 16}),
    (360, "scheduler", "PREEMPT", {"chips": 0}),
    (460, "scheduler", "ALLOCATE", {"chips": 8}),
    (460, "runtime", "CHECKPOINT_RESTORE_START", {}),
    (480, "runtime", "CHECKPOINT_RESTORE_END", {"step": 10}),
    (480, "runtime", "STEP_START", {"step": 11}),
    (580, "runtime", "STEP_END", {"step": 20}),
    (580, "scheduler", "FINISH", {}),
]

# Wall-clock seconds per category, from docs/metric.md section 4 (chip-seconds are these x 8).
EXPECTED_SECONDS = {
    "lifetime": 580,
    "queued": 200,
    "partial": 0,
    "all_allocated": 380,
    "init": 30,
    "compile": 60,
    "checkpoint_save": 10,
    "checkpoint_restore": 20,
    "lost": 60,
    "productive": 200,
    "pending": 0,
    "data_wait": 0,
    "idle": 0,
    "ideal": 100,
}
EXPECTED_RATIOS = {"sg": 380 / 580, "rg": 200 / 380, "pg": 100 / 200, "mpg": 100 / 580}


def records() -> dict[str, list[dict]]:
    """The timeline as Avro-ready records per stream."""
    out = {"scheduler": [], "runtime": [], "profiler": []}
    for n, (seconds, stream, kind, fields) in enumerate(TIMELINE):
        base = {"event_id": f"{JOB}-{n:02d}", "event_time": T0_US + seconds * 1_000_000, "job_id": JOB}
        if stream == "scheduler":
            record = {
                **base,
                "type": kind,
                "cluster": "c1",
                "accelerator": "tpu-v5e",
                "chips": fields["chips"] if "chips" in fields else 8,
                "workload": fields.get("workload"),
                "framework": fields.get("framework"),
                "team": fields.get("team"),
                "topology": None,
                "priority": None,
            }
        elif stream == "runtime":
            record = {**base, "type": kind, "step": fields.get("step"), "attempt": None}
        else:
            record = {
                **base,
                "step": fields["step"],
                "duration_s": 10.0,
                "chips": CHIPS,
                "ideal_flops": 7.88e15,
                "flops_source": "HLO_UNOPTIMIZED",
                "bytes_accessed": None,
            }
        out[stream].append(record)
    out["scheduler"].append(
        {
            "event_id": "cap-c1",
            "event_time": T0_US,
            "job_id": None,
            "type": "CAPACITY",
            "cluster": "c1",
            "accelerator": "tpu-v5e",
            "chips": 8,
            "workload": None,
            "framework": None,
            "team": None,
            "topology": None,
            "priority": None,
        }
    )
    return out
