"""`GoodputOptions`: the project's options as Beam pipeline options, and the check of a whole command line.

`mpg run`, `mpg stream` and the Flex Template launcher parse their command
lines here: the project's flags (fleet_goodput/options.py) and Beam's own share
one command line, and any other flag is an error naming the nearest known one,
where Beam alone would drop it with a warning. The parsed options travel with
the pipeline, so a Dataflow job shows its --input, --output and --as_of.
"""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, _BeamArgumentParser
from apache_beam.runners.dataflow.dataflow_runner import DataflowPipelineResult

from fleet_goodput.options import COMMAND_OPTIONS, OPTIONS, OptionsError, console_url, unknown_flag_message


class GoodputOptions(PipelineOptions):
    """--input, --output, --as_of, … (fleet_goodput/options.py holds the table)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        # Never `required` here: every PipelineOptions in the process parses these.
        for option in OPTIONS.values():
            option.add_to(parser, required=False)


OPTIONS_FLAGS = {option.flag for option in OPTIONS.values()}


class ViewCachingOptions(PipelineOptions):
    """Pipeline options that make each view once.

    Beam asks the pipeline's options for a `TypeOptions` view at every
    transform it applies and every type check it makes (888 times for one
    `mpg run`), and every view parses the flags again with a new argparse
    parser: about a second of a small run, whatever the input. Views of one
    options object share its values (Beam's own design: a change through one
    view shows in all), so one view per class serves every ask.
    """

    def view_as(self, cls):
        views = self.__dict__.setdefault("_views_by_class", {})
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]

    def __getstate__(self):
        state = dict(super().__getstate__())  # the base may return the live __dict__
        state.pop("_views_by_class", None)
        return state


def command_parser(command: str | None = None) -> _BeamArgumentParser:
    """A parser of Beam's own pipeline options (every PipelineOptions class but ours), and the command's."""
    parser = _BeamArgumentParser(usage=argparse.SUPPRESS, allow_abbrev=False, add_help=False,
                                 description="Beam's pipeline options, which `mpg run`, `mpg stream` and the "
                                             "Flex Template launcher accept beside their own:")
    for name in COMMAND_OPTIONS.get(command, ()):
        OPTIONS[name].add_to(parser, required=False)
    for cls in {str(c): c for c in PipelineOptions.__subclasses__() if c is not GoodputOptions}.values():
        cls._add_argparse_args(parser)  # Beam's own mechanism: it has no public listing of its options
    return parser


def check_flags(command: str, flags: list[str], where: str = "") -> None:
    """Raise OptionsError for the first flag that is neither the command's nor a Beam pipeline option."""
    parser = command_parser(command)
    _, unknown = parser.parse_known_args(flags)
    others = [arg for arg in unknown if arg.split("=", 1)[0] in OPTIONS_FLAGS]
    if others:
        name = others[0].split("=", 1)[0]
        takers = " or ".join(f"`{c}`" for c, names in COMMAND_OPTIONS.items() if name[2:] in names)
        raise OptionsError(f"{name} is an option of {takers}, not of `{command}`{where}")
    if unknown:
        known = [flag for action in parser._actions for flag in action.option_strings]
        raise OptionsError(unknown_flag_message(unknown[0], known) + where)


def parse_options(command: str, flags: list[str]) -> PipelineOptions:
    """The pipeline options of `flags`, checked: unknown flags and missing required options are errors."""
    check_flags(command, flags)
    options = ViewCachingOptions(flags)
    goodput = options.view_as(GoodputOptions)
    missing = [OPTIONS[name].flag for name in COMMAND_OPTIONS[command]
               if OPTIONS[name].required and getattr(goodput, name) is None]
    if missing:
        raise OptionsError(f"missing required option(s): {', '.join(missing)}")
    return options


def announce_job(result, options: PipelineOptions) -> None:
    """Print a submitted Dataflow job's id and console URL (Beam logs them only at INFO)."""
    if not isinstance(result, DataflowPipelineResult) or not result.has_job:  # none when a template is staged
        return
    cloud = options.view_as(GoogleCloudOptions)
    print(f"Dataflow job {result.job_id()} submitted: {console_url(cloud.project, cloud.region, result.job_id())}",
          flush=True)
