"""The ``lockstep`` command line. Subcommands call the same library functions as
the Airflow tasks, so what works here works in a DAG."""
from __future__ import annotations

__all__ = [
    "TOOLS", "build_parser", "main",
]

import argparse
import importlib
import sys
from collections.abc import Sequence

from lockstep.errors import LockstepError

#: Subcommands served by the tools beside the engine (the local platform, the demo, the benchmark,
#: the soak): the module that parses and runs each (``add_arguments(parser)``, ``main(args)``) and
#: its one-line help. Named here, imported only when that subcommand runs: building the parser, or
#: running an engine subcommand, loads no tool. The only place the engine names a tool
#: (tests/unit/test_layout.py checks both).
TOOLS: dict[str, tuple[str, str]] = {
    "dev": ("lockstep_dev.cli", "the embedded local platform (Kafka, S3, Airflow) as background processes"),
    "demo": ("lockstep_dev.demo", "platform + Airflow + the example pipeline for a few checkpoints, then a summary"),
    "bench": ("lockstep_bench.runner", "benchmark against Spark's own Kafka pipeline and the raw client; "
                                       "writes docs/BENCHMARKS.md"),
    "soak": ("lockstep_soak.cli", "run a pipeline for many checkpoints while faults are injected at random, "
                                  "then audit: lost / duplicated records (writes docs/RELIABILITY.md with --report)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lockstep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_, text) in TOOLS.items():
        # Listed for `lockstep --help`; the tool's own parser reads the rest of the line (its --help too).
        sub.add_parser(name, help=text, add_help=False)
    from lockstep.cli.commands import add_parsers

    add_parsers(sub)
    return parser


def _run_tool(name: str, argv: list[str]) -> int:
    module_name, text = TOOLS[name]
    parser = argparse.ArgumentParser(prog=f"lockstep {name}", description=text)
    tool = importlib.import_module(module_name)
    tool.add_arguments(parser)
    status: int = tool.main(parser.parse_args(argv))  # a module found by name: its attributes are untyped
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.command not in TOOLS:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command in TOOLS:
            return _run_tool(args.command, rest)
        from lockstep.cli.commands import run_command

        return run_command(args)
    except LockstepError as exc:  # the tools' errors too (lockstep_dev.procs.PlatformError)
        print(f"lockstep: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
