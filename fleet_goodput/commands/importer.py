"""`mpg import FORMAT SOURCE --out DIR`: public telemetry → the Avro streams of the contract.

(The module is not called `import.py` because `import` is a Python keyword.)
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import Counter
from pathlib import Path

from fleet_goodput import exits
from fleet_goodput.console import VERBOSITY_HELP, progress, say
from fleet_goodput.core.config import ConfigError, load_settings, part_names, peak_table
from fleet_goodput.core.timeutil import parse_time_us
from fleet_goodput.importers import IMPORTERS
from fleet_goodput.importers.common import DEFAULT_MAX_EXPANDED_MIB, Options, SourceError
from fleet_goodput.importers.import_folder import (
    CAVEATS_FILE,
    REJECTED_FILE,
    SOURCE_FILE,
    append_import,
    summary,
    write_import,
    write_rejections_only,
)
from fleet_goodput.importers.slurm import ACCELERATOR_MAP_HELP, AcceleratorMap
from fleet_goodput.telemetry.plausible import MAX_IDENTIFIER_LENGTH

# Rejections listed when nothing is left to import; the rest are counted.
MAX_LISTED = 20

PURPOSE = """\
Convert real telemetry into DIR/scheduler/*.avro, DIR/runtime/*.avro and
DIR/profiler/*.avro, ready for `mpg run --input DIR`."""

OUTPUTS = """\
What cannot be mapped is counted and listed with its reason in
DIR/{rejected}; what is imported but partly unknown or assumed (a run that
died without its stop record, steps no count gives, an assumed precision) is
listed in DIR/{caveats}; DIR/{source} records the inputs (with checksums), their
licence, the mapping and what the source cannot tell. The same input gives
byte-identical output. DIR is written under a temporary name and renamed into
place when complete: a failed import leaves no telemetry behind (where
nothing was usable, a new DIR holds only the rejected rows, each with its reason). With --append, DIR
(an earlier import) keeps what it holds and gains part files with only the
events it lacked, so importing overlapping inputs again adds nothing twice.
Mapping details and caveats per format: docs/importers.md (kubernetes:
docs/kubernetes.md).
""".format(rejected=REJECTED_FILE, caveats=CAVEATS_FILE, source=SOURCE_FILE)

# One example per format, from a checkout of fleet-goodput (public samples with their licences in tests/data).
EXAMPLES = {
    "philly": "mpg import philly tests/data/public/philly --out philly/ && mpg run --input philly/ --output philly-out/",
    "openb": "mpg import openb tests/data/public/openb --out openb/ --limit 500",
    "mlperf": "mpg import mlperf tests/data/public/mlperf --out mlperf/",
    "kineto": "mpg import kineto tests/data/public/kineto --out kineto/",
    "mgm": "mpg import mgm tests/data/mgm_goodput_log.jsonl --out mgm/ --accelerator tpu-v5e --chips 16",
    "logs": "mpg import logs tests/data/logs/megatron --profile megatron --job gpt-8b --accelerator h100 "
    "--out gpt/   # the log prints its world size (16 GPUs)",
    "orbax": "mpg import orbax tests/data/orbax/llama-7b --out ckpt/ --job llama-7b   # then beside the job's "
    "scheduler stream",
    "kubernetes": "mpg import kubernetes tests/data/kubernetes --cluster gke-1 --out k8s/",
    "slurm": "mpg import slurm tests/data/slurm --out slurm/      # sacct.txt, events.txt, nodes.txt (docs/slurm.md)",
    "job": "mpg import job tests/data/job/llama-7b.yaml --out job/   # a one-off job's scheduling, stated by hand",
}
EPILOG = (
    "examples, from a checkout of fleet-goodput (public samples with their licences in tests/data/public):\n"
    + "".join(f"  {example}\n" for example in EXAMPLES.values())
    + "\n`mpg import FORMAT --help` lists the options FORMAT reads.\n"
)
_EXITS = exits.describe(failed="the source cannot be read as FORMAT: nothing was written")


# Every option an importer may read: name → (flags, argparse keywords).
FLAGS: dict[str, tuple[tuple, dict]] = {
    "limit": (("--limit",), dict(type=int, metavar="N", help="import only the first N jobs (pods, runs, traces)")),
    "accelerator": (("--accelerator",), dict(metavar="KEY", help="catalogue key when the source names none")),
    "chips": (
        ("--chips",),
        dict(
            type=int,
            metavar="N",
            help="chips of the job (logs: default the world size the log prints; fewer than it is refused)",
        ),
    ),
    "profile": (
        ("--profile",),
        dict(metavar="NAME", help="the log profile (megatron, nemo, nemo1, or one of --profiles)"),
    ),
    "profiles": (
        ("--profiles",),
        dict(
            metavar="FILE",
            help="a YAML file of log profiles added to the built-in ones (shape: configs/log_profiles.yaml)",
        ),
    ),
    "job": (
        ("--job",),
        dict(
            metavar="ID",
            help="job id, for a source that names none: the id of the job's "
            "scheduler stream, to combine them (kineto: the run the traces "
            "are ranks of, so ranks imported apart join it)",
        ),
    ),
    "submit": (
        ("--submit",),
        dict(
            metavar="TIME",
            help="ISO-8601 submission time (default: the log's first time); places a log without timestamps",
        ),
    ),
    "cluster": (
        ("--cluster",),
        dict(
            metavar="NAME", help="cluster name (default: the format's name; slurm: sacct's Cluster column, else slurm)"
        ),
    ),
    "accelerator_labels": (
        ("--accelerator-labels",),
        dict(
            metavar="FILE",
            help="YAML {node label: {value: catalogue key}} added to the built-in map (docs/kubernetes.md)",
        ),
    ),
    "start": (
        ("--start",),
        dict(metavar="TIME", help="ISO-8601 time of the trace start (default 2023-01-01T00:00:00Z)"),
    ),
    "timezone": (
        ("--timezone",),
        dict(
            metavar="ZONE",
            help="the time zone sacct printed its times in, e.g. "
            "Europe/Berlin (default UTC; sacct prints the "
            "client's TZ without an offset)",
        ),
    ),
    "accelerator_map": (("--accelerator-map",), dict(metavar="FILE", help=ACCELERATOR_MAP_HELP)),
    "max_expanded_mib": (
        ("--max-expanded-mib",),
        dict(
            type=int,
            default=DEFAULT_MAX_EXPANDED_MIB,
            metavar="MIB",
            help="refuse an input file (a JSON trace, a .json.gz once decompressed, a log line) larger than this "
            f"(default {DEFAULT_MAX_EXPANDED_MIB} MiB): parsed JSON takes several times its size in memory",
        ),
    ),
}


# The options each format reads (importers/<format>.py: the Options fields it uses); required ones say so.
FORMAT_FLAGS = {
    "philly": ("limit", "max_expanded_mib"),
    "openb": ("limit", "start"),
    "mlperf": ("limit", "accelerator", "chips", "max_expanded_mib"),
    "kineto": ("limit", "accelerator", "job", "cluster", "max_expanded_mib"),
    "mgm": ("limit", "accelerator", "chips", "cluster", "max_expanded_mib"),
    "logs": ("profile", "profiles", "job", "accelerator", "chips", "submit", "cluster", "max_expanded_mib"),
    "orbax": ("job", "accelerator", "chips"),
    "kubernetes": ("cluster", "accelerator", "accelerator_labels", "max_expanded_mib"),
    "slurm": ("limit", "cluster", "timezone", "accelerator_map"),
    "job": (),  # the statement says it all
}
REQUIRED_NOTE = {
    "mgm": "--accelerator and --chips are required",
    "logs": "--profile is required; --job, --accelerator and --chips where the log does not print them",
    "orbax": "--job is required",
    "kubernetes": "--cluster is required",
}


def register(subparsers) -> None:
    formats = "\n".join(f"  {name:<10} {module.HELP}" for name, module in IMPORTERS.items())
    parser = subparsers.add_parser(
        "import",
        help="convert public traces, training logs, checkpoints, Kubernetes watch streams and Slurm "
        "accounting (philly, openb, mlperf, kineto, mgm, logs, orbax, kubernetes, slurm), or a job's "
        "scheduling stated by hand (job), into Avro telemetry",
        description=f"{PURPOSE}\n\nFormats:\n{formats}\n\n{OUTPUTS}",
        epilog=EPILOG + "\n" + VERBOSITY_HELP + "\n\n" + _EXITS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    by_format = parser.add_subparsers(dest="format", metavar="FORMAT", required=True)
    for name in sorted(IMPORTERS):
        module = IMPORTERS[name]
        note = f" ({REQUIRED_NOTE[name]})" if name in REQUIRED_NOTE else ""
        sub = by_format.add_parser(
            name,
            help=module.HELP + note,
            description=f"{module.HELP}{note}.\n\n{PURPOSE}\n\n{OUTPUTS}",
            epilog=f"example:\n  {EXAMPLES[name]}\n\n{VERBOSITY_HELP}\n\n{_EXITS}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        many = getattr(module, "MANY_SOURCES", False)
        sub.add_argument(
            "source",
            metavar="SOURCE",
            nargs="+",  # one only where not `many`: main says so
            help="the source files or folders" if many else "the source file or folder (docs/importers.md)",
        )
        sub.add_argument("--out", required=True, metavar="DIR", help="output folder (must be new or empty)")
        writing = sub.add_mutually_exclusive_group()
        writing.add_argument("--overwrite", action="store_true", help="replace DIR if it exists")
        writing.add_argument(
            "--append",
            action="store_true",
            help=f"DIR holds an earlier {name} import: add only the events whose ids it does not "
            "hold, as new part files",
        )
        sub.add_argument(
            "--config",
            metavar="FILE",
            help="settings YAML whose accelerator catalogue (its keys, and the part `names` that map "
            "mlperf and kineto part names to keys) the import uses",
        )
        for flag in FORMAT_FLAGS[name]:
            names, keywords = FLAGS[flag]
            sub.add_argument(*names, **keywords)
        # The options other formats read are absent here; main reads them all, as their defaults.
        absent = {
            flag: keywords.get("default") for flag, (_, keywords) in FLAGS.items() if flag not in FORMAT_FLAGS[name]
        }
        sub.set_defaults(func=main, **absent)


def main(args: argparse.Namespace) -> int:
    module = IMPORTERS[args.format]
    try:
        settings = load_settings(args.config)
        if args.limit is not None and args.limit <= 0:
            raise ValueError("--limit must be positive")
        if args.chips is not None and args.chips <= 0:
            raise ValueError("--chips must be positive")
        if args.max_expanded_mib <= 0:
            raise ValueError("--max-expanded-mib must be positive")
        for flag, value in (("--cluster", args.cluster), ("--job", args.job)):
            if value is not None and (not value or not value.isprintable() or len(value) > MAX_IDENTIFIER_LENGTH):
                raise ValueError(
                    f"{flag} must be a name of printable characters, at most {MAX_IDENTIFIER_LENGTH}: "
                    f"got {value[:40]!r}"
                )
        sources = [Path(source) for source in args.source]
        if len(sources) > 1 and not getattr(module, "MANY_SOURCES", False):
            raise ValueError(f"{args.format} reads one SOURCE, not {len(sources)}")
        options = Options(
            accelerators=frozenset(settings.accelerators),
            part_names=part_names(settings.accelerators),
            peaks=tuple(sorted(peak_table(settings.accelerators).items())),
            limit=args.limit,
            accelerator=args.accelerator,
            chips=args.chips,
            job=args.job,
            cluster=args.cluster,
            start_us=parse_time_us(args.start) if args.start else None,
            max_expanded_bytes=args.max_expanded_mib << 20,
            timezone=args.timezone,
            accelerator_map=AcceleratorMap.load(args.accelerator_map),
            submit_us=parse_time_us(args.submit) if args.submit else None,
            profile=args.profile,
            profiles=Path(args.profiles) if args.profiles else None,
            accelerator_labels=args.accelerator_labels,
        )
        source_text = " ".join(args.source)
        progress(f"Importing {args.format} from {source_text} ...")
        imported = module.read(sources if getattr(module, "MANY_SOURCES", False) else sources[0], options)
        if not summary(imported)["jobs"]:
            return _nothing_usable(args, imported)
        result = (
            append_import(imported, args.out)
            if args.append
            else write_import(imported, args.out, overwrite=args.overwrite)
        )
    except SourceError as exc:
        print(f"mpg import: {exc}\nmpg import: nothing was written to {args.out}", file=sys.stderr)
        return exits.FAILED
    except (ConfigError, ValueError, FileExistsError) as exc:
        print(f"mpg import: {exc}", file=sys.stderr)
        return exits.USAGE
    events = result["events"]
    print(
        f"Imported {result['jobs']:,} jobs into {args.out}: {events['scheduler']:,} scheduler, "
        f"{events['runtime']:,} runtime and {events['profiler']:,} profiler events."
    )
    if args.append:
        new = result["appended"]
        print(
            f"Appended {new['scheduler']:,} scheduler, {new['runtime']:,} runtime and {new['profiler']:,} profiler "
            "events that it did not hold yet" + ("" if any(new.values()) else ": nothing new") + "."
        )
    if not events["scheduler"]:
        say(
            "No scheduler events: put these files beside the job's scheduler stream (the same job id) before "
            "`mpg run`; alone, every event is rejected for want of a SUBMIT."
        )
    elif not events["runtime"]:
        say("No runtime events: goodput from this import measures SG only; RG, PG and MPG need the runtime stream.")
    rejected = result["rejected"]
    if rejected:
        say(f"Rejected {sum(rejected.values()):,} (listed in {Path(args.out) / REJECTED_FILE}):")
        for reason, count in sorted(rejected.items(), key=lambda item: -item[1]):
            say(f"  {count:>8,}  {reason}")
    else:
        say("Rejected nothing.")
    caveats = result["caveats"]
    if caveats:
        say(f"Caveats on {sum(caveats.values()):,} imported items (listed in {Path(args.out) / CAVEATS_FILE}):")
        for caveat, count in sorted(caveats.items(), key=lambda item: -item[1]):
            say(f"  {count:>8,}  {caveat}")
    after = f" Next: mpg run --input {shlex.quote(str(args.out))} --output OUT" if events["scheduler"] else ""
    say(f"Provenance and mapping: {Path(args.out) / SOURCE_FILE}.{after}")
    return exits.OK


def _nothing_usable(args: argparse.Namespace, imported) -> int:
    """No job is left to import: say why (every distinct reason with its count, then the first rejected
    inputs), and write the rejected rows alone to OUT's rejections file where OUT is new or empty, so
    that the one reason that mattered is not lost among thousands."""
    lines = [
        f"mpg import: nothing usable in {' '.join(args.source)}: no job could be imported"
        + (", every input was rejected:" if imported.rejections else ".")
    ]
    reasons = Counter(r.reason for r in imported.rejections)
    if len(reasons) > 1 or len(imported.rejections) > MAX_LISTED:
        lines += [
            f"  {count:>8,}  {reason}"
            for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
        ]
        lines.append("  the first of them:" if len(imported.rejections) > MAX_LISTED else "  each:")
    lines += [
        f"  {r.file}{f' ({r.where})' if r.where != 'file' else ''}: {r.reason}" + (f" ({r.detail})" if r.detail else "")
        for r in imported.rejections[:MAX_LISTED]
    ]
    if len(imported.rejections) > MAX_LISTED:
        lines.append(f"  ... and {len(imported.rejections) - MAX_LISTED:,} more")
    written = write_rejections_only(imported, args.out) if imported.rejections else None
    if written:
        lines.append(f"mpg import: no telemetry was written to {args.out}; every rejected row is listed in {written}")
    else:
        lines.append(f"mpg import: nothing was written to {args.out}")
    print("\n".join(lines), file=sys.stderr)
    return exits.FAILED
