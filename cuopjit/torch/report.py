"""What the "cuopjit" backend did with each graph: which nodes run on cuopjit (in which kernel), which stay
torch and why, and which fusions were made.

Every compilation records a `Report` (`last_report()` gives the latest; `reports()` those kept, the
64 latest). `explain(model, *inputs, **options)` compiles `model` with the backend, runs it once
under `torch.no_grad()` and returns the reports of the graphs Dynamo made of it (one per graph
break), printable as a table:

    print(cuopjit.torch.explain(model, x))
"""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import torch

_KEPT = 64
_history: collections.deque = collections.deque(maxlen=_KEPT)
_count = [0]


@dataclass(frozen=True)
class Entry:
    """One node: where it runs ("cuopjit" or "torch") and, for cuopjit, its kernel; for torch, why."""
    node: str
    target: str
    where: str
    detail: str


@dataclass(frozen=True)
class Kernel:
    """One cuopjit kernel call of the compiled graph: the nodes it replaces and the fusions it made."""
    name: str
    nodes: tuple[str, ...]
    fusions: tuple[str, ...]


@dataclass
class Report:
    """One graph's compilation; `fallback` says why the whole graph runs on torch (None: it was planned)."""
    number: int
    entries: list[Entry] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fallback: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def on_cuopjit(self) -> list[str]:
        return [e.node for e in self.entries if e.where == "cuopjit"]

    @property
    def on_torch(self) -> dict[str, str]:
        return {e.node: e.detail for e in self.entries if e.where == "torch"}

    @property
    def fusions(self) -> list[str]:
        return [f for k in self.kernels for f in k.fusions]

    def summary(self) -> str:
        if self.fallback is not None:
            return f"cuopjit backend, graph {self.number}: runs on torch: {self.fallback}"
        return (f"cuopjit backend, graph {self.number}: {len(self.on_cuopjit)} nodes on cuopjit in "
                f"{len(self.kernels)} kernels, {len(self.on_torch)} nodes on torch, {len(self.fusions)} fusions")

    def __str__(self) -> str:
        lines = [self.summary()]
        lines += [f"  note: {n}" for n in self.notes]
        for i, k in enumerate(self.kernels):
            lines.append(f"  kernel {i}: {k.name}  <- {', '.join(k.nodes)}")
            lines += [f"      fusion: {f}" for f in k.fusions]
        lines += [f"  torch: {e.node} ({e.target}): {e.detail}" for e in self.entries if e.where == "torch"]
        return "\n".join(lines)


@dataclass
class Explanation:
    """The reports of one `explain` call (one per graph Dynamo made)."""
    reports: list[Report]

    @property
    def on_cuopjit(self) -> list[str]:
        return [n for r in self.reports for n in r.on_cuopjit]

    @property
    def on_torch(self) -> dict[str, str]:
        return {n: why for r in self.reports for n, why in r.on_torch.items()}

    @property
    def fusions(self) -> list[str]:
        return [f for r in self.reports for f in r.fusions]

    def __str__(self) -> str:
        return "\n".join(map(str, self.reports)) or "cuopjit backend: no graph was compiled (Dynamo reused one)"


def new_report(options: dict[str, Any]) -> Report:
    """A numbered report, recorded (the latest is `last_report()`)."""
    _count[0] += 1
    report = Report(_count[0], options=dict(options))
    _history.append(report)
    return report


def last_report() -> Report | None:
    """The report of the latest graph the backend compiled in this process (None before the first)."""
    return _history[-1] if _history else None


def reports() -> list[Report]:
    """The reports kept (the latest 64), oldest first."""
    return list(_history)


def explain(model: Any, *inputs: Any, **options: Any) -> Explanation:
    """Compile `model` with the "cuopjit" backend (`options` as torch.compile's), run it once on `inputs`
    under torch.no_grad() and return what the backend did with each graph. Dynamo's caches are reset first
    (torch._dynamo.reset()), so graphs compiled earlier in the process are compiled again when next called."""
    start = _count[0]
    torch._dynamo.reset()   # a model compiled before would reuse its graphs and report nothing
    compiled = torch.compile(model, backend="cuopjit", options=options or None)
    with torch.no_grad():
        compiled(*inputs)
    return Explanation([r for r in _history if r.number > start])
