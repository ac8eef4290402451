"""The `cuopjit` command: prewarm the cache (no GPU needed), show generated source, PTX or SASS, explain a
kernel choice, benchmark against PyTorch, inspect the cache."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .args import config_args, config_from
from .._version import __version__
from ..errors import CompileError, CuopjitError
from ..ops import FAMILIES
from .inspect import add_explain, add_show
from .info import cmd_info
from .cache import add_cache_commands
from .bench import add_bench
from .prewarm import add_prewarm
from .tune import add_tune


def build_parser() -> argparse.ArgumentParser:
    """The `cuopjit` parser: one subcommand per command group, each registered by its module."""
    parser = argparse.ArgumentParser(prog="cuopjit", description=__doc__)
    parser.add_argument("--version", action="version", version=f"cuopjit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_prewarm(sub)
    add_show(sub, config_args, list(FAMILIES))
    add_explain(sub, config_args, list(FAMILIES))
    add_bench(sub)
    add_tune(sub, config_args, config_from)
    p = sub.add_parser("info", help="versions, NVRTC targets, cache directory, devices (exit 1: the cache "
                                    "directory is unusable)")
    p.set_defaults(func=cmd_info)
    add_cache_commands(sub)
    return parser


def _reason(exc: BaseException) -> str:
    """The one line (a compile error: the whole log) that tells the user what went wrong."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc).strip() or type(exc).__name__
    return text if isinstance(exc, CompileError) else text.splitlines()[0]  # a compile log is the point


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `cuopjit` command; returns the exit status (2: bad input, 1: failure, 130: interrupted)."""
    command = "cuopjit"
    try:
        ns = build_parser().parse_args(argv)
        command = f"cuopjit {ns.command}"
        return ns.func(ns) or 0
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` & co.: stop quietly, as other CLIs do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, TypeError, CuopjitError, OSError) as exc:
        reason = _reason(exc)
        print(f"{command}: error: {reason.removeprefix(command + ': ')}", file=sys.stderr)
        return 2 if isinstance(exc, (ValueError, TypeError)) else 1


if __name__ == "__main__":
    sys.exit(main())
