"""The `mpg` command line: one subcommand per module in fleet_goodput/commands/.

Each command module exposes `register(subparsers)`, which adds its parser and
sets `func(args) -> exit code` as its default.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from fleet_goodput import __version__, commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpg",
        description="ML Productivity Goodput (MPG = Scheduling x Runtime x Program Goodput) for accelerator fleets. "
                    "Start with `mpg demo`: it simulates a fleet-day, runs the pipeline and prints the headline.",
    )
    parser.add_argument("--version", action="version", version=f"fleet-goodput {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{module.name}").register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Beam and its optional cloud clients log warnings about themselves that
    # say nothing about the user's data; our own messages go to stdout/stderr.
    logging.basicConfig(level=logging.ERROR)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if extra and not getattr(args, "accepts_beam_args", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.beam_args = extra
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
