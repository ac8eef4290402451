"""Kernel choices as data: one declaration per family names a choice's fields and its label.

A family's `choices(problem, config, target)` returns frozen records of the kernel shape it plans
(threads, vector width, tile, ...) plus how the kernel is compiled (`opts`, keyword-only, default
options); `label` names the choice in plans, tuning records, `explain` and the cache listing.

    GemvChoice = kernel_choice("GemvChoice", "threads vec items rows groups unroll",
                               "b{threads}_v{vec}x{items}_r{rows}_g{groups}",
                               "Threads, scalars per load, loads per row in flight, ...")
    GemvChoice(256, 4, 2, 1, 1, True).label  ->  'b256_v4x2_r1_g1'

A label that spells a flag as a letter is a function of the record instead of a format string.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable, Union

from ..build import pipeline


Label = Union[str, Callable[[Any], str]]


def _formatted(self: Any) -> str:
    return self.LABEL.format_map({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})


def kernel_choice(name: str, fields: str, label: Label, doc: str) -> type:
    """A frozen dataclass `name` with the space-separated `fields` (positional, in order), a keyword-only
    `opts: pipeline.CompileOpts` (default: the default options) and a `label` property: `label`.format(fields)
    for a string, `label(choice)` for a function."""
    cls = dataclasses.make_dataclass(
        name, [(f, Any) for f in fields.split()]
        + [("opts", pipeline.CompileOpts, dataclasses.field(default=pipeline.DEFAULT_OPTS, kw_only=True))],
        frozen=True, namespace={"LABEL": label, "__doc__": doc,
                                "label": property(_formatted if isinstance(label, str) else label)})
    cls.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
    return cls
