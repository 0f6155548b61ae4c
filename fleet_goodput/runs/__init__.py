"""Runs: each plans, runs and commits a Beam pipeline (a batch run, a local stream, a Flex Template launch) or replays telemetry."""
