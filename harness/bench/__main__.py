"""``python -m harness.bench NAME [OPTIONS]``: run one benchmark; ``--list`` names them all with the docs that quote
them; ``--report PATH`` writes the run's figures as JSON beside the text it prints.

One parser: the command's own options, then the benchmark's name, then that benchmark's options, added by its
module to a parser this command builds (so ``python -m harness.bench NAME --help`` shows them). Only the named
benchmark's module is imported.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import sys
from collections.abc import Sequence

from harness.bench import BENCHMARKS, find
from harness.bench.report import Report


def _command_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and the docs that quote each")
    parser.add_argument("--report", metavar="PATH", help="write the benchmark's figures here as JSON")
    parser.add_argument("name", nargs="?", help="the benchmark (see --list)")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options (NAME --help)")
    return parser


def listing() -> str:
    """One line a benchmark: its name, what it measures, and the docs that quote its figures."""
    width = max(len(entry.name) for entry in BENCHMARKS)
    return "\n".join(
        f"{entry.name:<{width}}  {entry.summary}  [{', '.join(entry.docs) or 'not quoted in the docs'}]"
        for entry in BENCHMARKS
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run the named benchmark, print and write its report; return the exit status."""
    command = _command_parser()
    top = command.parse_args(argv)
    if top.list:
        print(listing())
        return 0
    if not top.name:
        command.error("name a benchmark (--list names them)")
    try:
        entry = find(top.name)
    except KeyError:
        command.error(f"no benchmark {top.name!r} (--list names them)")
    module = importlib.import_module(entry.module)
    parser = argparse.ArgumentParser(
        prog=f"python -m harness.bench {entry.name}",
        description=module.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    # --report is the command's, but it is taken after the name too, where a user adding it to a run types it.
    parser.add_argument("--report", dest="report_path", metavar="PATH", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(top.options)
    report_path = top.report or args.report_path
    del args.report_path
    args.parser = parser  # a benchmark that checks its options together refuses them through it
    report = Report(entry.name, list(top.options))
    outcome = module.bench(args)
    if inspect.iscoroutine(outcome):
        outcome = asyncio.run(outcome)
    status = report.finish(outcome)
    if report_path:
        report.write(report_path)
    return status


if __name__ == "__main__":
    sys.exit(main())
