"""Imported first by the server that shard processes fork from (fleet_goodput/shards.py), so that
it and every shard process end at once and without a word on Ctrl-C, which a terminal sends to
every process of the command: the command's own process says it in one line and removes what the
run staged (fleet_goodput/faults.py, fleet_goodput/batch.py). Its import is all it does."""

from __future__ import annotations

import os
import signal

from fleet_goodput import exits

signal.signal(signal.SIGINT, lambda signum, frame: os._exit(exits.INTERRUPTED))
