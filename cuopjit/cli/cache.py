"""`cuopjit cache ...`: list, count, clear, verify, prune, export and import the kernel cache."""
from __future__ import annotations

import argparse
import datetime
import json
import sys

from ..cache import KernelCache, get_cache
from ..cache.access import advice
from ..errors import CuopjitError, format_bytes
from ..log import warn_environment
from ..config import parse_size


def _cache(ns: argparse.Namespace, changes: str | None = None) -> KernelCache:
    """The cache the options name; CuopjitError with a one-line reason when it cannot be read, or (when the
    command `changes` it: "cleared", "pruned", ...) written."""
    warn_environment()
    cache = get_cache(ns.cache_dir) if ns.cache_dir else get_cache()
    if cache.layer is not None and (problem := cache.layer.access_problem()):
        raise CuopjitError(f"cannot use the cache: {problem}; {advice(problem)}")
    if changes and (problem := cache.problem()):
        raise CuopjitError(f"nothing can be {changes}: {problem}; {advice(problem)}")
    return cache


def cmd_ls(ns: argparse.Namespace) -> int:
    """One line per entry: name, arch, size, last use, template parameters, layer."""
    rows = _cache(ns).entries()
    name_width = max([40, *(len(e.name) for e in rows)])
    arch_width = max([7, *(len(e.arch) for e in rows)])
    for e in rows:
        used = datetime.datetime.fromtimestamp(e.mtime).strftime("%Y-%m-%d %H:%M")
        params = " ".join(f"{k}={v}" for k, v in e.params)
        layer = "" if e.writable else "  [read-only]"
        print(f"{e.name:<{name_width}} {e.arch:<{arch_width}} {format_bytes(e.size):>10}  {used}  "
              f"{e.template} {params}{layer}")
    print(f"{len(rows)} entries")
    return 0


def cmd_stats(ns: argparse.Namespace) -> int:
    """Counters persisted across processes, plus entry count and size."""
    s = _cache(ns).stats().as_dict()
    s.pop("memory_hits")
    if ns.json:
        print(json.dumps(s, indent=1))
        return 0
    for k, v in s.items():
        shown = format_bytes(v) if k == "bytes" else f"{v:.2f}" if isinstance(v, float) else v
        print(f"{k:<16} {shown}")
    return 0


def cmd_clear(ns: argparse.Namespace) -> int:
    """Delete every entry, record and counter of the writable cache (nothing to do on a fresh machine)."""
    cache = _cache(ns, "cleared")
    removed = cache.clear()
    print(f"removed {removed} entries from {cache.directory}")
    return 0


def cmd_verify(ns: argparse.Namespace) -> int:
    """Exit 1 when a bad entry was found (also with --fix, which moves them aside)."""
    report = _cache(ns).verify(fix=ns.fix)
    for path, reason in report.bad:
        print(f"BAD {path}: {reason}")
    fixed = f"; moved {report.moved} aside, removed {report.temp_files_removed} stale temp files" if ns.fix else ""
    print(f"{report.ok} entries ok, {len(report.bad)} bad{fixed}")
    return 1 if report.bad else 0


def cmd_prune(ns: argparse.Namespace) -> int:
    """Evict least-recently-used entries down to --max-size."""
    cache = _cache(ns, "pruned")
    result = cache.prune(parse_size(ns.max_size))
    print(f"evicted {result.evicted} entries, freed {format_bytes(result.freed)}, "
          f"{format_bytes(result.remaining)} left")
    return 0


def cmd_export(ns: argparse.Namespace) -> int:
    """Write every valid entry and record into a bundle file."""
    result = _cache(ns).export_bundle(ns.file)
    for path, reason in result.bad:
        print(f"skipped bad entry {path}: {reason}", file=sys.stderr)
    print(f"exported {result.entries} entries and {result.records} records to {ns.file}")
    return 0


def cmd_import(ns: argparse.Namespace) -> int:
    """Exit 1 when the bundle held bad entries (the good ones are still installed)."""
    result = _cache(ns, "imported").import_bundle(ns.file)
    for name, reason in result.bad:
        print(f"BAD {name}: {reason}", file=sys.stderr)
    print(f"imported {result.entries} entries and {result.records} records "
          f"({result.skipped} already present, {len(result.bad)} bad)")
    return 1 if result.bad else 0


def _size(text: str) -> str:
    try:
        parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_cache_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `cache` and its subcommands on the `cuopjit` parser; each sets `func(ns) -> int`."""
    cache = subparsers.add_parser("cache", help="inspect and manage the kernel cache",
                                  description="Inspect and manage the persistent kernel cache.")
    sub = cache.add_subparsers(dest="cache_command", required=True, metavar="SUBCOMMAND")
    commands = [
        ("ls", cmd_ls, "list entries (name, arch, size, last use, parameters)"),
        ("stats", cmd_stats, "hits, misses, compiles, evictions, rejections, size"),
        ("clear", cmd_clear, "delete every entry, record and counter of the writable cache"),
        ("verify", cmd_verify, "check every entry's checksum and key; exit 1 if any is bad"),
        ("prune", cmd_prune, "evict least-recently-used entries down to a size"),
        ("export", cmd_export, "write all entries into a portable bundle file"),
        ("import", cmd_import, "verify and install the entries of a bundle file"),
    ]
    for name, func, text in commands:
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.add_argument("--cache-dir", metavar="DIR", help="cache directory (default: CUOPJIT_CACHE_DIR or the "
                                                          "user cache dir)")
        p.set_defaults(func=func)
        if name == "stats":
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        elif name == "verify":
            p.add_argument("--fix", action="store_true", help="move bad entries to rejected/, drop stale temp files")
        elif name == "prune":
            p.add_argument("--max-size", required=True, type=_size, metavar="SIZE", help="e.g. 500M, 2GiB")
        elif name in ("export", "import"):
            p.add_argument("file", metavar="FILE", help="bundle path (a .tar.gz)")
