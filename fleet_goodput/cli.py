"""The `mpg` command line: one subcommand per module in fleet_goodput/commands/.

Each command module exposes `register(subparsers)`, which adds its parser and
sets `func(args) -> exit code` as its default. Command modules import only
what their parser needs; Beam, DuckDB, Great Expectations and the rest load
inside `func`, and only the named command's module is imported, so `mpg --help`
and `mpg sql` start without Beam.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
import threading

from fleet_goodput import __version__, commands, console, exits, faults
from fleet_goodput.core.options import unknown_flag_message

# Command modules whose command is not their module's name.
_MODULE_OF = {"import": "importer"}


def _command_modules(argv: list[str]) -> list[str]:
    """The module of the command named in `argv`, or every command module (for `mpg --help` and errors)."""
    names = sorted(module.name for module in pkgutil.iter_modules(commands.__path__))
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    module = _MODULE_OF.get(named, named)
    return [module] if module in names else names


def _add_verbosity(parser: argparse.ArgumentParser, default) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="count",
        default=default,
        help="more detail: -v this project's, -vv also the INFO logs of Beam, Dataflow, Great "
        "Expectations and other libraries (which otherwise log warnings at most)",
    )
    group.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=console.QUIET,
        default=default,
        help="errors and the result line(s) only: no progress or summaries",
    )


_EXIT_CODES = exits.describe(
    failed="failed: the data did not pass, or nothing could be committed (each command's --help says when)",
    busy="another process holds the output or the period",
)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mpg",
        description="ML Productivity Goodput (MPG = Scheduling x Runtime x Program Goodput) for accelerator fleets. "
        "Start with `mpg demo`: it simulates a fleet-day, runs the pipeline and prints the headline.",
        epilog=f"{console.VERBOSITY_HELP}\n\n{_EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fleet-goodput {__version__}")
    _add_verbosity(parser, default=0)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules(argv or []):
        importlib.import_module(f"{commands.__name__}.{module}").register(subparsers)
    for subparser in subparsers.choices.values():
        # SUPPRESS: `mpg -v run` must not be undone by the subcommand's default.
        for each in (subparser, *_nested(subparser).values()):  # `mpg import slurm ... -q` too
            _add_verbosity(each, default=argparse.SUPPRESS)
    parser.commands = subparsers.choices
    return parser


def _nested(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A command's own subcommands (`mpg import FORMAT`), by name; none for most commands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _refuse_unknown_flags(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An unknown --flag of a command that takes no pipeline options, with the nearest known one.

    Checked before argparse parses, which would first complain about a
    required option that the mistyped flag was meant to be.
    """
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    command = parser.commands.get(named)
    if command is None or command.get_default("accepts_beam_args"):
        return  # `mpg run` and `mpg stream` check theirs with Beam's (pipelines/options.py)
    rest = argv[argv.index(named) + 1 :]
    inner = next((arg for arg in rest if not arg.startswith("-")), None)
    if inner in _nested(command):  # `mpg import slurm`: the format's own options
        command, rest = _nested(command)[inner], rest[rest.index(inner) + 1 :]
    known = [flag for action in command._actions for flag in action.option_strings]
    unknown = [arg for arg in rest if arg.startswith("--") and arg.split("=", 1)[0] not in known]
    if unknown:
        command.error(unknown_flag_message(unknown[0], known))


def main(argv: list[str] | None = None) -> int:
    """Run `mpg ARGV`; whatever it prints shows control characters, never obeys them (console.py)."""
    try:
        with console.printable_streams():
            return _run(argv)
    except BrokenPipeError:
        # Whoever read the output stopped (`mpg sql … | head`): stop quietly, as Unix tools do, with
        # the status a shell gives a command killed by SIGPIPE. Output still buffered has nowhere to go.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exits.BROKEN_PIPE


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = None
    try:
        with faults.sigterm_stops():
            parser = build_parser(argv)
            _refuse_unknown_flags(parser, argv)
            args, extra = parser.parse_known_args(argv)
            console.configure(args.verbosity)
            if args.verbosity < console.LIBRARIES:  # -vv shows the libraries' own logs whole
                faults.hide_logged_faults()
            if args.command is None:
                parser.print_help()
                return exits.USAGE
            if extra and not getattr(args, "accepts_beam_args", False):
                parser.commands[args.command].error(f"unexpected argument(s): {' '.join(extra)}")
            # What the command's parser left: Beam's pipeline options, for `mpg run` and `mpg stream` to
            # check and hand to Beam (pipelines/options.py). Their own options are parsed, here, once.
            args.beam_args = extra
            return args.func(args)
    except BaseException as error:  # Ctrl-C and SIGTERM too: KeyboardInterrupt is no Exception
        return _end_on_fault(error, args)


def _end_on_fault(error: BaseException, args: argparse.Namespace | None) -> int:
    """Say in one line which fault of the machine stopped the command and what stands, and return
    its exit code; re-raise anything else (SystemExit from argparse, a bug)."""
    named = vars(args) if args else {}
    fault = faults.fault_of(error, outputs=_paths(named, _OUTPUTS), inputs=_paths(named, _INPUTS))
    if fault is None:
        raise error
    command = named.get("command")
    print(
        f"mpg{' ' + command if command else ''}: {fault.reason}; {_AFTER_FAULT.get(command, _AFTER_FAULT[None])}",
        file=sys.stderr,
    )
    return fault.code


def _paths(named: dict, names: tuple[str, ...]) -> list[str | None]:
    """The paths the arguments `names` give: one each, or several (`mpg import kubernetes A B`)."""
    given = [named.get(name) for name in names]
    return [path for value in given for path in (value if isinstance(value, list) else [value])]


# The arguments that name what a command writes, and what it reads: a permission denied under
# the first is an output that cannot be written, elsewhere an input that cannot be read.
_OUTPUTS = ("output", "out", "dir", "target")
_INPUTS = ("input", "source", "config")
# What stands when a fault (fleet_goodput/faults.py) stops a command: the end of its one line.
_AFTER_FAULT = {
    "run": "nothing was lost: the output keeps its last committed run, and the same command run again continues "
    "from it",
    "stream": "nothing was lost: the output keeps the stream's last committed run, and the stream resumes from it "
    "when started again",
    "demo": "run `mpg demo` again",
    "validate": "the store is unchanged: validate again once fixed",
    "report": "the store and the period's published report are unchanged",
    "import": "nothing was written",
    "collect": "the files of earlier polls stay: run it again, it continues from its cursor",
    "simulate": "what it wrote is incomplete: simulate again with --overwrite",
    "replay": "the files written so far stay: replay again with --replace",
    None: "the store is unchanged",
}


def program() -> None:
    """`mpg` as a program (its console script and `python -m fleet_goodput.cli`): main(), then exit.

    A stop (Ctrl-C, SIGTERM) ends the process even where a library's thread was left running.
    Beam's state sampler (apache_beam/runners/worker/statesampler.py, 2.77) marks itself started only
    once its sampling thread, not a daemon, runs: a stop landing between the two leaves that thread
    sampling for ever, unstopped, and the interpreter's exit waits for it (a second SIGTERM to
    `mpg stream` hung so). What the command had to clean up it has cleaned up by then: flush what was
    printed and end without waiting."""
    code = main()
    stopped = code in (exits.INTERRUPTED, exits.TERMINATED)
    if stopped and any(not thread.daemon for thread in threading.enumerate() if thread is not threading.main_thread()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    program()
