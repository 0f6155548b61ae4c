"""`GoodputOptions`: the project's options as Beam pipeline options, and the check of Beam's flags.

`mpg run` and `mpg stream` read their own options with argparse (the CLI) and
hand Beam only the rest, which `beam_flags_for` checks: any flag that is
neither Beam's nor theirs is an error naming the nearest known one, where
Beam alone would drop it with a warning. The Flex Template launcher has no
CLI: it parses its whole command line here (`parse_options`), and its
options travel with the job as the text given, so the job's options page on
Dataflow shows its --input, --output and --as_of.

Only Beam's public API is used (tested with apache-beam 2.77; pyproject.toml
pins >=2.77,<3): options are declared as Beam documents it (a PipelineOptions
subclass whose `_add_argparse_args` adds them, despite its underscore), and
the parser of every option Beam knows is the one `get_all_options` hands to
its public `add_extra_args_fn`.
"""

from __future__ import annotations

import argparse
import weakref

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions
from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult

from fleet_goodput.core.config import SettingsFile, beam_flags
from fleet_goodput.core.options import COMMAND_OPTIONS, OPTIONS, OptionsError, console_url, unknown_flag_message


class GoodputOptions(PipelineOptions):
    """--input, --output, --as_of, … (fleet_goodput/core/options.py holds the table)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        # Never `required` here: every PipelineOptions in the process parses these. Kept as the text
        # given (the job shows it); the launcher types each once (`Option.value_of`). Not shown by
        # `--help_beam`, which lists Beam's: each command's --help lists its own.
        for option in OPTIONS.values():
            option.add_to(parser, required=False, typed=False, shown=False)


# The runner a run on Dask uses: Beam's DaskRunner, which Beam 2.77 knows only by its full name, with its
# ParDo translated anew (pipelines/on_dask.py: Beam's own loses outputs). Each of these names it.
DASK_RUNNER = "fleet_goodput.pipelines.on_dask.DaskRunner"
RUNNER_NAMES = {
    name.lower(): DASK_RUNNER
    for name in ("dask", "DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner", DASK_RUNNER)
}


def runner_class(runner: str | None) -> str | None:
    """The runner class `--runner` names: Beam's own for a name it knows, ours for one of `RUNNER_NAMES`."""
    return RUNNER_NAMES.get((runner or "").lower(), runner)


def load_runner_options(flags: list[str]) -> None:
    """Make Beam know the options of the runner `flags` name (or whose options they give), where that
    runner's are not among Beam's own until its module is imported: the Dask runner's (--dask_client_address,
    …), whose module needs dask.distributed and costs a third of a second, so it is imported only then."""
    runner = runner_class(PipelineOptions(flags).view_as(StandardOptions).runner)
    if runner != DASK_RUNNER and not any(flag.startswith("--dask_") for flag in flags):
        return
    try:
        import apache_beam.runners.dask.dask_runner  # noqa: F401 - registers its DaskOptions with Beam
        import dask.distributed  # noqa: F401 - which the runner imports only when it runs
    except ImportError as exc:
        raise OptionsError(
            f"Beam's Dask runner needs dask.distributed, which is not installed ({exc}): "
            "install fleet-goodput's dask extra (pip install -e '.[dask]' in a checkout; "
            "docs/scale.md)"
        ) from None


# The views each ViewCachingOptions made, by class; kept beside the options, not in them, so that the
# options pickle and compare as Beam's own do.
_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class ViewCachingOptions(PipelineOptions):
    """Pipeline options that make each view once.

    Beam asks the pipeline's options for a `TypeOptions` view at every
    transform it applies and every type check it makes (776 times for the
    worked example's pipeline), and every view parses the flags again with a
    new argparse parser: 0.3 s of its 1 s, whatever the input. Views of one
    options object share its values (`view_as` documents it: a change through
    one view shows in all), so one view per class serves every ask.
    """

    def view_as(self, cls):
        views = _VIEWS.setdefault(self, {})
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]


# Beam's parsers take these as asking for their help: no suggestion names them.
HELP_FLAGS = ("-h", "--help")


def beam_parser() -> argparse.ArgumentParser:
    """The parser of every pipeline option Beam knows in this process: its own, those of a runner whose
    module is loaded (`load_runner_options`), and ours (hidden from its help). Beam builds it for
    `get_all_options`, which hands it to `add_extra_args_fn`."""
    parsers = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    return parsers[0]


def help_parser() -> argparse.ArgumentParser:
    """`beam_parser`, for `--help_beam` to print."""
    parser = beam_parser()
    parser.usage = argparse.SUPPRESS
    parser.description = (
        "Beam's pipeline options, which `mpg run`, `mpg stream` and the Flex Template launcher accept beside their own:"
    )
    return parser


def check_flags(command: str, flags: list[str], where: str = "", *, beam_only: bool = False) -> None:
    """Raise OptionsError for the first flag that is neither the command's nor a Beam pipeline option
    (with `beam_only`, for the first that is not Beam's: the command read its own already)."""
    load_runner_options(flags)
    parser = beam_parser()
    others_flags = {OPTIONS[name].flag for name in OPTIONS if name not in COMMAND_OPTIONS[command]}
    known = [
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag not in others_flags and flag not in HELP_FLAGS
    ]
    given, unknown = parser.parse_known_args(flags)
    own = [OPTIONS[name].flag for name in COMMAND_OPTIONS[command] if getattr(given, name, None) not in (None, False)]
    if beam_only and own:
        raise OptionsError(
            f"{own[0]} is an option of `{command}` itself, not a Beam pipeline option{where}: "
            "give it where the command's options go"
        )
    others = [arg for arg in flags if arg.split("=", 1)[0] in others_flags]
    if others:
        name = others[0].split("=", 1)[0]
        takers = " or ".join(f"`{c}`" for c, names in COMMAND_OPTIONS.items() if name[2:] in names)
        raise OptionsError(f"{name} is an option of {takers}, not of `{command}`{where}")
    if unknown:
        raise OptionsError(unknown_flag_message(unknown[0], known) + where)


def beam_flags_for(command: str, config: str | SettingsFile | None, flags: list[str], where: str = "") -> list[str]:
    """Beam's pipeline options for a run of `command`: the `beam:` section of `config` (a settings file's
    path, or the file read already), then `flags` (which come after, so they win), each checked to be
    Beam's (`where` says where `flags` came from)."""
    config_flags = beam_flags(config)
    check_flags(command, config_flags, where=f" (in the beam: section of {config})", beam_only=True)
    check_flags(command, flags, where=where, beam_only=True)
    return config_flags + list(flags)


def parse_options(command: str, flags: list[str]) -> PipelineOptions:
    """The pipeline options of `flags`, checked: unknown flags and missing required options are errors."""
    check_flags(command, flags)
    options = ViewCachingOptions(flags)
    goodput = options.view_as(GoodputOptions)
    missing = [
        OPTIONS[name].flag
        for name in COMMAND_OPTIONS[command]
        if OPTIONS[name].required and getattr(goodput, name) is None
    ]
    if missing:
        raise OptionsError(f"missing required option(s): {', '.join(missing)}")
    return options


def announce_job(result, options: PipelineOptions) -> None:
    """Print a submitted Dataflow job's id and console URL (Beam logs them only at INFO)."""
    if not isinstance(result, DataflowPipelineResult) or not result.has_job:  # none when a template is staged
        return
    cloud = options.view_as(GoogleCloudOptions)
    print(
        f"Dataflow job {result.job_id()} submitted: {console_url(cloud.project, cloud.region, result.job_id())}",
        flush=True,
    )
