"""The project's pipeline options: one spelling per flag for `mpg run`, `mpg stream` and the Flex Template launcher.

Flags are spelled like Beam's own pipeline options (`--as_of`, `--temp_location`),
because they share one command line with them. This module is Beam-free, so the
CLI can build its help without importing Beam; `pipelines/options.py` registers
the same table with Beam as `GoodputOptions(PipelineOptions)` (the launcher's
parser) and checks the rest of a command line against Beam's options.

Each option's text becomes its typed value once, where the command line is
read (`Option.type`: `--as_of` becomes microseconds there, or the command
stops with what is wrong with it), and a batch run carries the values down as
one `RunOptions`; nothing below reads a flag or parses a time again.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable
from dataclasses import dataclass

from fleet_goodput.core.config import SettingsFile, settings_file
from fleet_goodput.core.timeutil import parse_time_us


class OptionsError(ValueError):
    """A command line that cannot be used: an unknown flag (with the nearest known one), a missing
    option, or a value that is not what its option takes."""


def time_us(text: str) -> int:
    """An option's ISO-8601 time → microseconds since the epoch (argparse names the flag when it is not one)."""
    try:
        return parse_time_us(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_RUN_NUMBER = 2**63 - 1  # a run's number is a Delta table version: a signed 64-bit integer


def run_number(text: str) -> int:
    """A run's number as `mpg runs` lists it (argparse names the flag when it is not one): a whole number
    from 1, and no larger than a store can hold, so that a mistyped one is a bad argument, not damage."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a run number: {text!r} (`mpg runs` lists them)") from None
    if not 1 <= number <= MAX_RUN_NUMBER:
        raise argparse.ArgumentTypeError(f"not a run number: {text} (runs are numbered from 1; `mpg runs` lists them)")
    return number


@dataclass(frozen=True)
class Option:
    name: str  # the flag without its dashes, and the attribute it sets
    help: str
    metavar: str | None = None
    type: Callable[[str], object] = str  # text → the typed value, applied once, where the command line is read
    is_switch: bool = False  # a flag without a value
    required: bool = False

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    def add_to(
        self, parser: argparse.ArgumentParser, *, required: bool, typed: bool = True, shown: bool = True
    ) -> None:
        """The option on `parser`; with `typed=False` it keeps the text given (`value_of` types it); with
        `shown=False` its help does not list it."""
        help_text = self.help if shown else argparse.SUPPRESS
        if self.is_switch:
            parser.add_argument(self.flag, dest=self.name, action="store_true", help=help_text)
        else:
            parser.add_argument(
                self.flag,
                dest=self.name,
                type=self.type if typed else str,
                metavar=self.metavar,
                help=help_text,
                required=required and self.required,
            )

    def value_of(self, given):
        """The typed value of the option's text `given` (None and a switch's bool stay as they are)."""
        if given is None or self.is_switch:
            return given
        try:
            return self.type(given)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise OptionsError(f"{self.flag} {given}: {exc}") from None


OPTIONS = {
    option.name: option
    for option in (
        Option(
            "input",
            "folder (local or gs://) with scheduler/, runtime/, profiler/ Avro files; "
            "`mpg stream` watches it and creates it if missing",
            "DIR",
            required=True,
        ),
        Option(
            "output",
            "the output store (local or gs://): Delta Lake tables/, the runs and their state; "
            "locally also manifest.json and goodput.duckdb",
            "DIR",
            required=True,
        ),
        Option(
            "as_of",
            "ISO-8601 time that ends still-running jobs and capacity; later events wait in the store "
            "for a later run (default: how far the sources state they observed every cluster, the earliest "
            "cluster's end; for files that state nothing, inferred from the scheduler's event times)",
            "TIME",
            time_us,
        ),
        Option(
            "confirm_as_of",
            "run with an --as_of more than the allowed lateness past the newest scheduler event, "
            "which is refused otherwise as a likely typo (a month too far ends every running job "
            "there and makes the next day's events late), or new files that state a cluster observed "
            "from more than 7 days after the store's observation of it ended (a wrong folder)",
            is_switch=True,
        ),
        Option("window_s", "window length in seconds, overriding the config's; must divide a day", "SECONDS", int),
        Option(
            "config",
            "settings YAML overriding configs/default.yaml: window_s, accelerators, size_classes, "
            "and the sections beam: (pipeline options) and runs: (lateness, retention, a stream's source); "
            "an output keeps the settings of its first run, and a run whose settings would change its "
            "figures is refused",
            "FILE",
        ),
        Option("replace", "remove OUTPUT's earlier runs and start it afresh", is_switch=True),
        Option(
            "chunk_hours",
            "compute a long input in chunks of this much event time (24: a day), one pipeline "
            "after the other, so memory follows one chunk; still one committed run (default: a "
            "local run whose new files hold more than 24 MiB or 1.25 million events, without "
            "--as_of, is chunked by itself, about that much a chunk, where any stream's events are)",
            "HOURS",
            int,
        ),
        Option(
            "workers",
            "processes Beam's local runner computes the run's pipeline in: short for "
            "--direct_num_workers=N --direct_running_mode=multi_processing (default: Beam's, one; "
            "on Dataflow, set --max_num_workers)",
            "N",
            int,
        ),
        Option(
            "stop_after_idle_s",
            "stop when no new file has arrived for this long (default: run until interrupted)",
            "SECONDS",
            float,
        ),
        Option(
            "allowed_lateness_s",
            "how late an event may be and still update results (default 3600, or the config's runs.allowed_lateness_s)",
            "SECONDS",
            int,
        ),
    )
}

# The options each entry point takes, in help order. The launcher's are the
# Flex Template's parameters (templates/goodput_metadata.json).
COMMAND_OPTIONS = {
    "run": ("input", "output", "as_of", "confirm_as_of", "config", "replace", "chunk_hours", "workers"),
    "stream": ("input", "output", "stop_after_idle_s", "allowed_lateness_s", "config", "replace"),
    "launcher": ("input", "output", "as_of", "window_s", "config"),
}

BEAM_HELP = """\
Any other --flag must be a Beam pipeline option (--runner, --project, --region,
--temp_location, --sdk_container_image, …): list them with
`mpg {command} --help_beam`. An unknown flag is an error naming the nearest one."""


@dataclass(frozen=True)
class RunOptions:
    """What one batch run is asked to do, `mpg run`'s options or the API's `run` arguments, each
    already its typed value (`given_as_of_us`, not the text of --as_of): built once where they are read,
    then carried down as they are (fleet_goodput/runs/batch.py, `run`)."""

    input: str
    output: str
    # --as_of; None: the run's as-of time is how far the scheduler's clock has reached (fleet_goodput/core/asof.py)
    given_as_of_us: int | None = None
    confirm_as_of: bool = False
    replace: bool = False
    # The settings file (--config), read once where the options are built (a path given is read here): its keys
    # replace the store's (fleet_goodput/store/stored_settings.py), without the file being read again.
    config: SettingsFile | None = None
    chunk_hours: int | None = None
    # Beam's own pipeline options, checked: the config's `beam:` section, the command line's, and what
    # --workers is short for (fleet_goodput/runs/beam_flags.py, `beam_args_for`)
    beam_args: tuple[str, ...] = ()

    def __post_init__(self):
        if self.chunk_hours is not None and self.given_as_of_us is not None:
            raise ValueError("--chunk_hours computes up to each chunk's latest event; it does not take --as_of")
        if self.chunk_hours is not None and self.chunk_hours < 1:
            raise ValueError(f"--chunk_hours must be at least 1 (got {self.chunk_hours})")
        if self.config is not None:
            config = settings_file(self.config)
            object.__setattr__(self, "config", config)
            # A settings file's own mistakes (a wrong type, an unknown key: ConfigError) are refused here,
            # before anything is read or written: checking the settings it names keeps them
            # (`SettingsFile.named`) for the run to layer over the store's once it holds the output's lock
            # (fleet_goodput/store/stored_settings.py). Nothing else is read for it, the defaults included.
            _ = config.named

    @classmethod
    def of(cls, values, beam_args: list[str] | tuple[str, ...] = (), config: SettingsFile | None = None) -> RunOptions:
        """The run options of a parsed command line (`values` has an attribute per option of `mpg run`,
        each already typed) and Beam's options for it; `config` is the file `values.config` names if the
        caller read it already (for the `beam:` section in `beam_args`), so it is not read again."""
        return cls(
            input=str(values.input),
            output=str(values.output),
            given_as_of_us=values.as_of,
            confirm_as_of=values.confirm_as_of,
            replace=values.replace,
            config=config if config is not None else values.config,
            chunk_hours=values.chunk_hours,
            beam_args=tuple(beam_args),
        )


def typed_values(command: str, values) -> dict:
    """The typed value of each of the command's options that `values` holds as the text given (the
    launcher's, parsed by Beam); OptionsError names a flag whose text is not what it takes."""
    return {name: OPTIONS[name].value_of(getattr(values, name)) for name in COMMAND_OPTIONS[command]}


def add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """The command's options on `parser` (an `mpg` subcommand's), required ones marked so."""
    group = parser.add_argument_group("goodput options")
    for name in COMMAND_OPTIONS[command]:
        OPTIONS[name].add_to(group, required=True)


def unknown_flag_message(flag: str, known: list[str]) -> str:
    """`flag` is not an option: name the nearest known flag, if one is near."""
    name = flag.split("=", 1)[0]
    if not name.startswith("-"):
        return f"unexpected argument {flag!r}"
    near = difflib.get_close_matches(name.replace("-", "_").lstrip("_"), [k.lstrip("-") for k in known], n=1)
    hint = f"; did you mean --{near[0]}?" if near else ""
    return f"unknown option {name}{hint}"


def console_url(project: str | None, region: str | None, job_id: str) -> str:
    """The Cloud Console page of a Dataflow job."""
    return f"https://console.cloud.google.com/dataflow/jobs/{region}/{job_id}?project={project}"


def launch_problems(options: dict, input_dir: str | None, output_dir: str | None) -> tuple[list[str], list[str]]:
    """What a real Dataflow launch with these effective pipeline options would lack: (missing, warnings).

    Without a `missing` option Beam refuses to translate the job (or, without
    --temp_location, retries for minutes to create a default bucket); with a
    warning the job translates but would fail or misbehave on Dataflow.
    """
    missing = [
        f"--{name} is unset: {why}"
        for name, why in (
            ("project", "a launch needs the Google Cloud project to run the job in"),
            ("region", "a launch needs the region to run the job in"),
            (
                "temp_location",
                "a launch needs a gs:// folder for temporary files (without one, Beam retries for "
                "minutes to create a default bucket)",
            ),
        )
        if not options.get(name)
    ]
    warnings = []
    temp_location = options.get("temp_location")
    if temp_location and not str(temp_location).startswith("gs://"):
        warnings.append(f"--temp_location {temp_location} is not on gs://: Dataflow cannot use it")
    if not any(options.get(name) for name in ("sdk_container_image", "setup_file", "extra_packages")):
        warnings.append(
            "--sdk_container_image is unset: workers would run Beam's stock image, which lacks "
            "fleet_goodput, and fail at their first step; build the image (Dockerfile) and pass it"
        )
    for flag, folder in (("--input", input_dir), ("--output", output_dir)):
        if folder and not str(folder).startswith("gs://"):
            warnings.append(f"{flag} {folder} is not on gs://: Dataflow workers cannot read or write local folders")
    return missing, warnings
