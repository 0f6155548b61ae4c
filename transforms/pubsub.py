"""Reading telemetry from Pub/Sub on Dataflow: one subscription per stream,
one Avro-encoded (schemaless) event per message."""

from __future__ import annotations

import io

import apache_beam as beam
import fastavro

from fleet_goodput import schemas
from fleet_goodput.transforms.read import DecodeRecords


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
        return (
            pbegin
            | "ReadMessages" >> beam.io.ReadFromPubSub(subscription=self.subscription, timestamp_attribute="event_time")
            | "DecodeAvro" >> beam.Map(_decode_message, stream=self.stream)
            | "Validate" >> DecodeRecords(self.stream, self.accelerators, source=self.subscription)
        )
