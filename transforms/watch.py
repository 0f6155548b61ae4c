"""Unbounded sources: a folder that keeps receiving Avro files, or Pub/Sub.

Locally, `FolderEventSource` watches INPUT/<stream>/*.avro and serves what it
reads as a TestStream event service on loopback: the local streaming runner
(Beam's DirectRunner in streaming mode) reads events from it through
`TestStream(endpoint=…)`, with real watermark semantics. (The in-process
FnApiRunner was measured to fire event-time timers past a splittable source's
watermark, so it cannot run event time faithfully.) Each new file is read once,
in the order files appeared (modification time, then name); after each poll
with new data the watermark moves to the latest event time read minus
`watermark_lag_s`. When the source stops — after `stop_after_idle_s` without a
new file, or on `request_stop()` (the CLI's signal handler) — it sends every
key it has seen an END punctuation at the latest event time, which closes each
key exactly as a batch run's as-of time would, then ends the stream.

On Dataflow, `ReadPubSubEvents` reads one subscription per stream, one
Avro-encoded (schemaless) event per message.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import fastavro
from apache_beam.coders import FastPrimitivesCoder
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.testing.test_stream import ElementEvent, ProcessingTimeEvent, TestStream, WatermarkEvent
from apache_beam.testing.test_stream_service import TestStreamServiceController
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp

import schemas
from fleet_goodput.decode import decode_file
from transforms.read import EVENTS, READ_COUNTS, REJECTED, DecodeRecords
from transforms.stream_sessionize import end_of_input

TAGS = (EVENTS, REJECTED, READ_COUNTS)
_STOP = threading.Event()
# The DirectRunner gives up on a silent event service after 30 s; an idle
# folder sends a heartbeat well within that.
_HEARTBEAT_S = 5.0


def request_stop() -> None:
    """Ask a running folder source to finish: punctuate, flush, end."""
    _STOP.set()


def _listing(root: Path) -> list[tuple[str, Path]]:
    """(stream, path) of every telemetry file, in the order they appeared."""
    found = [(path.stat().st_mtime_ns, path.name, stream, path)
             for stream in schemas.STREAMS for path in (root / stream).glob("*.avro")]
    return [(stream, path) for _, _, stream, path in sorted(found)]


class FolderEventReader:
    """Turns a growing folder into TestStream events (the service's `reader`)."""

    def __init__(self, root: str, accelerators, poll_s: float, watermark_lag_s: int, stop_after_idle_s: float | None,
                 progress=None):
        self.root = Path(root)
        self.progress = progress  # called with (files read, events read, watermark µs) after each poll with data
        self.accelerators = accelerators
        self.poll_s = poll_s
        self.lag_us = watermark_lag_s * 1_000_000
        self.stop_after_idle_s = stop_after_idle_s
        self.coder = FastPrimitivesCoder()
        self.keys_seen: set[str] = set()
        self.latest_us: int | None = None
        self.watermark_us = 0
        self.files_read = 0
        self.events_read = 0

    def read_multiple(self, unused_specs) -> Iterator:
        for event in self.events():
            yield _event_proto(event, self.coder)

    def events(self) -> Iterator:
        """Element and watermark events as files land; punctuation and the end when it stops."""
        _STOP.clear()
        seen, last_new, last_sent = 0, time.monotonic(), time.monotonic()
        while True:
            listing = _listing(self.root)
            for stream, path in listing[seen:]:
                yield from self._read(stream, path)
                self.files_read += 1
            if len(listing) > seen:
                seen, last_new = len(listing), time.monotonic()
                yield from self._advance_watermark()
                last_sent = time.monotonic()
                if self.progress:
                    self.progress(self.files_read, self.events_read, self.watermark_us)
            idle_s = time.monotonic() - last_new
            if _STOP.is_set() or (self.stop_after_idle_s is not None and idle_s >= self.stop_after_idle_s):
                yield from self._punctuate()
                return
            if time.monotonic() - last_sent >= _HEARTBEAT_S:
                yield ProcessingTimeEvent(Duration(seconds=self.poll_s))
                last_sent = time.monotonic()
            time.sleep(self.poll_s)

    def _read(self, stream: str, path: Path) -> Iterator:
        with open(path, "rb") as handle:
            decoded = decode_file(stream, str(path), handle, self.accelerators)
        batches, rejected, read = decoded.batches, decoded.rejected, decoded.read
        elements = []
        for key, events in batches.items():
            self.keys_seen.add(key)
            latest = max(event[0] for event in events)
            self.latest_us = latest if self.latest_us is None else max(self.latest_us, latest)
            elements.append(TimestampedValue((key, events), Timestamp(micros=max(min(e[0] for e in events), self.watermark_us))))
        if elements:
            yield ElementEvent(elements, tag=EVENTS)
        if rejected:
            stamp = Timestamp(micros=self.watermark_us)
            yield ElementEvent([TimestampedValue({**row, "partition_time_us": row["event_time_us"] or self.latest_us or 0}, stamp)
                                for row in rejected], tag=REJECTED)
        self.events_read += read
        yield ElementEvent([TimestampedValue(((stream, "read"), read), Timestamp(micros=self.watermark_us))], tag=READ_COUNTS)

    def _advance_watermark(self) -> Iterator:
        if self.latest_us is None:
            return
        watermark = max(self.watermark_us, self.latest_us - self.lag_us)
        if watermark > self.watermark_us:
            self.watermark_us = watermark
            for tag in TAGS:
                yield WatermarkEvent(Timestamp(micros=watermark), tag=tag)

    def _punctuate(self) -> Iterator:
        if self.latest_us is None:
            return
        end = end_of_input(self.latest_us)
        stamp = Timestamp(micros=max(self.latest_us, self.watermark_us))
        yield ElementEvent([TimestampedValue((key, [end]), stamp) for key in sorted(self.keys_seen)], tag=EVENTS)


def _event_proto(event, coder) -> beam_runner_api_pb2.TestStreamPayload.Event:
    """A TestStream event as the DirectRunner's event-service client decodes it.

    Not `event.to_runner_api()`: in Beam 2.77 that writes times in
    milliseconds, while the client reads them as microseconds, so every
    watermark arrived 1000 times too early in event time and no timer fired
    before the stream ended.
    """
    payload = beam_runner_api_pb2.TestStreamPayload.Event
    if isinstance(event, ElementEvent):
        return payload(element_event=payload.AddElements(tag=event.tag, elements=[
            beam_runner_api_pb2.TestStreamPayload.TimestampedElement(
                encoded_element=coder.encode(tv.value), timestamp=tv.timestamp.micros)
            for tv in event.timestamped_values]))
    if isinstance(event, WatermarkEvent):
        return payload(watermark_event=payload.AdvanceWatermark(new_watermark=event.new_watermark.micros, tag=event.tag))
    return payload(processing_time_event=payload.AdvanceProcessingTime(advance_duration=event.advance_by.micros))


class FolderEventSource:
    """The folder reader served on loopback; use as a context manager around the pipeline run."""

    def __init__(self, reader: FolderEventReader):
        self.reader = reader
        self.service = TestStreamServiceController(reader)

    def __enter__(self) -> FolderEventSource:
        self.service.start()
        return self

    def __exit__(self, *exc) -> None:
        self.service.stop()

    def transform(self) -> TestStream:
        return TestStream(coder=self.reader.coder, output_tags=set(TAGS), endpoint=self.service.endpoint)


def _decode_message(data: bytes, stream: str) -> dict:
    return fastavro.schemaless_reader(io.BytesIO(data), schemas.load(stream))


class ReadPubSubEvents(beam.PTransform):
    """One Pub/Sub subscription of Avro-encoded events of one stream → the outputs of `DecodeRecords`.

    Publishers set the message attribute `event_time` (RFC 3339 or epoch
    milliseconds) so Dataflow's watermark follows event time, not publish time.
    """

    def __init__(self, stream: str, subscription: str, accelerators):
        super().__init__()
        self.stream = stream
        self.subscription = subscription
        self.accelerators = accelerators

    def expand(self, pbegin):
        return (pbegin
                | "ReadMessages" >> beam.io.ReadFromPubSub(subscription=self.subscription, timestamp_attribute="event_time")
                | "DecodeAvro" >> beam.Map(_decode_message, stream=self.stream)
                | "Validate" >> DecodeRecords(self.stream, self.accelerators, source=self.subscription))
