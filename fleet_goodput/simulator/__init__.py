"""A deterministic accelerator-fleet simulator with independent ground truth.

`simulate(out_dir, seed=..., hours=..., jobs=...)` writes the three telemetry
streams as Avro (docs/metric.md section 2) and, beside them, the chip-seconds the
pipeline should find (docs/metric.md section 3), computed from the simulated timeline
rather than from the events. The modules, in the order data flows:

- `fleet`: draws clusters, capacity drains and jobs from the seed;
- `scheduler`: the gang scheduler (queues, partial allocation, preemption, failures);
- `runtime`: one attempt of a job's runtime, and what becomes of its steps;
- `timeline`: the record of what happened, read by the two paths below;
- `emit`: the events, shuffled into part files;
- `truth`: the expected chip-seconds per job and window, and capacity;
- `run`: `simulate()`, tying them together.

Command line: `mpg simulate --out DIR` (fleet_goodput/commands/simulate.py).
"""

__all__ = ["START_US", "SimulationSummary", "simulate"]


def __getattr__(name: str):
    # `simulate` and its companions load on first use (PEP 562), so that a module reading only the
    # fleet's constants (`mpg --help` lists `mpg simulate`'s) does not load pyarrow with `truth`.
    if name in __all__:
        from fleet_goodput.simulator import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
