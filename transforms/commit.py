"""A stream's results → runs of the output store: `CommitToStore`, the sink of the streaming pipeline.

The tables' rows and the count deltas are gathered in the global window and
fired as panes: early, every `commit_every_s` of processing time while the
stream runs, and once more when it drains (the watermark's end). Each pane
is one commit of the store (fleet_goodput/store/stream_commit.py), by the same
code on every runner and every store, a local folder or gs://. The pane's
index numbers the commit, so a bundle the runner retries after its commit was
made commits nothing twice. All of a pane goes to one key, so commits come one
at a time, in order: a stream's results are a few thousand rows a minute.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import apache_beam as beam
from apache_beam.transforms import trigger, window

from fleet_goodput.core.config import Settings
from fleet_goodput.core.run_settings import RunSettings
from fleet_goodput.store.delta_store import Store
from fleet_goodput.store.errors import StoreBusy
from fleet_goodput.store.stream_commit import Pane, commit_pane

COUNTS = "counts"  # the tag of the count deltas among the tables' rows
# How often a running stream commits what its windows produced (processing time): a run a minute.
COMMIT_EVERY_S = 60
# While another run holds a local store (`mpg check --repair`, say), a commit tries again this often, up to
# BUSY_FOR_AT_MOST_S; then the bundle fails, and the runner retries it.
BUSY_RETRY_S = 5.0
BUSY_FOR_AT_MOST_S = 600.0


def pane_of(items) -> Pane:
    """The (tag, element) items of one pane → the rows of each table and the summed counts."""
    rows, counts = defaultdict(list), defaultdict(int)
    for tag, element in items:
        if tag == COUNTS:
            key, n = element
            counts[tuple(key)] += n
        else:
            rows[tag].append(element)
    return Pane(dict(rows), dict(counts))


class _CommitPaneFn(beam.DoFn):
    def __init__(self, output: str, settings: Settings, run_settings: RunSettings, stream_id: str, source: str):
        self.output = output
        self.settings = settings
        self.run_settings = run_settings
        self.stream_id = stream_id
        self.source = source

    def setup(self):
        self.store = Store(self.output)

    def process(self, keyed, pane_info=beam.DoFn.PaneInfoParam):
        _, items = keyed
        pane = pane_of(items)
        waited = 0.0
        while True:
            try:
                record = commit_pane(
                    self.store,
                    pane,
                    stream_id=self.stream_id,
                    sequence=pane_info.index,
                    settings=self.settings,
                    run_settings=self.run_settings,
                    source=self.source,
                )
            except StoreBusy:
                if waited >= BUSY_FOR_AT_MOST_S:
                    raise
                time.sleep(BUSY_RETRY_S)
                waited += BUSY_RETRY_S
                continue
            if record is not None:
                yield record.run_id
            return


class CommitToStore(beam.PTransform):
    """{table name: rows, "counts": ((stream, outcome), n) deltas} on a stream → committed runs of the
    store at `output`; outputs the id of each run committed."""

    def __init__(
        self,
        output: str,
        settings: Settings,
        run_settings: RunSettings,
        source: str,
        commit_every_s: int = COMMIT_EVERY_S,
    ):
        super().__init__()
        self.output = output
        self.settings = settings
        self.run_settings = run_settings
        self.source = source
        self.commit_every_s = commit_every_s
        # This pipeline's name for its commits: a retry finds its own, a new pipeline numbers afresh.
        self.stream_id = f"fleet-goodput-stream-{uuid.uuid4().hex}"

    def expand(self, outputs: dict):
        tagged = [
            collection | f"Tag_{name}" >> beam.Map(lambda element, tag: (tag, element), tag=name)
            for name, collection in outputs.items()
        ]
        return (
            tagged
            | "AllResults" >> beam.Flatten()
            | "IntoPanes"
            >> beam.WindowInto(
                window.GlobalWindows(),
                trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(self.commit_every_s)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            )
            | "OneKey" >> beam.Map(lambda item: ("store", item))
            | "GatherPane" >> beam.GroupByKey()
            | "CommitPane"
            >> beam.ParDo(_CommitPaneFn(self.output, self.settings, self.run_settings, self.stream_id, self.source))
        )
