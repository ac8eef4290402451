"""The one forward every operator shares: bind the call, probe the plan memo, run the plan.

An operator class checks inputs and holds weights; its family (pure functions in the same
module) chooses and plans kernels. Per class:

    bind(*args, **kwargs)     -> (key, pointers, result): cheap, no checks; the key holds
                                 everything that decides the plan (shapes, dtypes, device,
                                 alignment, the operator's own state)
    problem(*args, **kwargs)  -> the family's problem, after checking every argument
                                 (raises TypeError / ValueError naming the operand), or None
                                 when there is nothing to compute

A warm call is one `bind`, one dict probe (a per-settings memo) and the launches; a miss plans under the settings
given (a JIT wrapper's, or DEFAULT), loads the kernels and memoises the result.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, ClassVar, Hashable, Sequence

import numpy as np

from ..device import driver, streams
from ..run import executor
from .. import interop, target as targets
from ..run.plan import EMPTY, Family, Plan
from ..config import DEFAULT, RunSettings
from ..operands import call_key, operands, recipe_of, resolve, returned
from ..layout import CONTIGUOUS
from ..tensor import Tensor, wrap
from ..tuning import fastest

MEMO_LIMIT = 512   # plans kept per operator and settings; the oldest go first
_current = streams.local
_recent = streams.recent
_foreign = interop.READERS.get   # type -> key reader of a foreign array type seen before (None: Tensor, number)


class Operator:
    """Base class: subclasses set `dtype` and `family` and implement `bind` and `problem`."""

    dtype: ClassVar[np.dtype]
    family: ClassVar[Family]

    def __init__(self) -> None:
        self._plans: dict[RunSettings, dict[Hashable, Callable]] = {DEFAULT: {}}
        self._default_plans = self._plans[DEFAULT]   # the bare forward's memo, one probe away
        self._state: tuple = ()        # _plan_settings() as of the last setter: part of every plan key
        self._lock = threading.Lock()
        # (settings, call_key) -> (runner, pointers, result recipe) of calls on foreign arrays; every setter clears it
        self.foreign_plans: dict[tuple, tuple] = {}

    # --- the one forward ----------------------------------------------------------------------
    def forward(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        """Run the operator on `args` (see the class's docstring), on `stream` or the current one.

        Operands may be Tensors or torch / CuPy / JAX CUDA arrays (zero-copy); the result is what was passed."""
        if stream is None:
            s = _current.stream
        else:
            recent = _recent[0]
            s = recent[1] if stream is recent[0] else streams.handle(stream)
        if args and _foreign(type(args[0])) is not None:   # a torch / CuPy / JAX array: one probe on the reads
            try:
                run, pointers, recipe = self.foreign_plans[(DEFAULT, call_key(args, kwargs))]
                result = args[recipe] if type(recipe) is int else resolve(recipe, args, kwargs)
            except (LookupError, TypeError):
                run = None
            if run is None:
                run, pointers, result = self.prepared(DEFAULT, s, args, kwargs)
        else:
            try:
                key, pointers, result = self.bind(*args, **kwargs)
                run = self._default_plans[key]
            except (LookupError, AttributeError, TypeError):
                run = None
            if run is None:   # outside the handler: an error about the arguments chains no internal one
                run, pointers, result = self.prepared(DEFAULT, s, args, kwargs)
        run(pointers, s)
        return result

    __call__ = forward

    def prepared(self, settings: RunSettings, s: int, args: tuple, kwargs: dict, caller: str = ""
                 ) -> tuple[executor.Runner, tuple, Any]:
        """The memoised runner for this call under `settings` (planned and loaded on a miss), its pointers
        and its result. Foreign arrays among the operands are swapped for views (cuopjit/operands.py) and the
        outcome memoised under the call's key (`foreign_plans`), so the next such call is one probe.

        `caller`: how errors name the operator when a JIT wrapper calls (default: this class's name)."""
        try:     # a call on foreign arrays seen before (keyword operands, a JIT wrapper's first branch)
            run, pointers, recipe = self.foreign_plans[(settings, call_key(args, kwargs))]
            return run, pointers, args[recipe] if type(recipe) is int else resolve(recipe, args, kwargs)
        except (LookupError, TypeError):
            pass
        memo = self._plans.get(settings) or self.memo(settings)
        swapped = operands(args, kwargs)
        if swapped is None:
            mine, theirs = (args, kwargs), None
        else:
            mine, theirs = swapped[:2], (args, kwargs)
        try:
            key, pointers, result = self.bind(*mine[0], **mine[1])
            run = memo[key]
        except (LookupError, AttributeError, TypeError):
            run = None
        if run is None:
            run, pointers, result = self._load(memo, settings, s, mine[0], mine[1], caller)
        if theirs is None:
            return run, pointers, result
        recipe, key = recipe_of(result, *mine), call_key(*theirs)
        if recipe is not None and key is not None:     # the next such call is one probe (forward's first branch)
            if len(self.foreign_plans) >= MEMO_LIMIT:
                self.foreign_plans.clear()
            try:
                self.foreign_plans[(settings, key)] = (run, pointers, recipe)
            except TypeError:   # an unhashable argument (a list of sizes): such calls take this path each time
                pass
        return run, pointers, returned(result, swapped[2])

    def _load(self, memo: dict, settings: RunSettings, s: int, args: tuple, kwargs: dict, caller: str
              ) -> tuple[executor.Runner, tuple, Any]:
        """Check the arguments, plan, load and memoise (a miss of `prepared`)."""
        problem = self.problem(*args, **kwargs)   # raises on bad arguments, with the reason
        key, pointers, result = self.bind(*args, **kwargs)
        if problem is None:
            run = executor.NOTHING
        else:
            streams.check_not_capturing(s, type(self).__name__)
            ordinal = driver.current_ordinal()
            plan = self._choose(problem, settings, targets.of_device(ordinal), args, kwargs)
            run = executor.load(plan, ordinal, settings, caller or type(self).__name__)
        with self._lock:
            if len(memo) >= MEMO_LIMIT:
                memo.pop(next(iter(memo)))
            memo[key] = run
        return run, pointers, result

    def set_epilogue(self, expression: Any, **bound: Any) -> None:
        """Epilogues fuse into products only (Fusable overrides this): refuse, saying where they run."""
        raise TypeError(f"{type(self).__name__} takes no epilogue: set_epilogue works on GemmFloat/Double, "
                        "MatMul, BatchMatMul and Convolution2D; fuse elementwise work after it with "
                        "cuopjit.ElementwiseFloat/Double")

    def memo(self, settings: RunSettings) -> dict[Hashable, Callable]:
        """The plan memo for `settings` (bind key -> loaded plan): a JIT wrapper probes it directly."""
        memo = self._plans.get(settings)
        if memo is None:
            with self._lock:
                memo = self._plans.setdefault(settings, {})
        return memo

    def _choose(self, problem: Any, settings: RunSettings, target: targets.Target, args: tuple,
                kwargs: dict) -> Plan:
        """The family's first choice, or with auto-tuning the fastest recorded one."""
        choices = self.family.choices(problem, settings.config, target)
        if settings.tuning and len(choices) > 1:
            return fastest(self, problem, choices, settings, target, args, kwargs)
        return self.family.plan(problem, choices[0], target)

    def plan(self, *args: Any, settings: RunSettings = DEFAULT, target: targets.Target | None = None,
             **kwargs: Any) -> Plan:
        """The plan a forward with these arguments would run (checks them; launches nothing)."""
        swapped = operands(args, kwargs)
        if swapped is not None:
            args, kwargs, _ = swapped
        problem = self.problem(*args, **kwargs)
        if problem is None:
            return EMPTY
        target = target or targets.of_device(driver.current_ordinal())
        return self.family.default_plan(problem, settings.config, target)

    def _plan_settings(self) -> tuple:
        """The operator's own settings that decide its plan (alpha, eps, weight shapes, ...); none by default."""
        return ()

    def _settings_changed(self) -> None:
        """Called by every setter of a plan-deciding setting: later forwards key their plans on the new ones
        (and bind again: memoised pointers of foreign-array calls may name an old weight)."""
        self._state = self._plan_settings()
        self.foreign_plans.clear()

    # --- checks -----------------------------------------------------------------------------------
    def check_operand(self, name: str, t: Any, ndim: int | None = None, shape: Sequence[int] | None = None,
                      layouts: tuple[str, ...] = (CONTIGUOUS,)) -> Tensor:
        """`t` as a live Tensor of this operator's dtype on the current device (and of `shape`, if given),
        in one of `layouts` (cuopjit/layout.py; an operator that reads others says which and plans on t.layout).

        A foreign GPU array is wrapped (zero-copy); anything else raises one line naming the operand."""
        op = type(self).__name__
        if not isinstance(t, Tensor):   # a torch / CuPy / JAX CUDA array: a view that keeps it alive
            t = wrap(t, f"{op}: {name}")
        if t.dtype != self.dtype:
            raise TypeError(f"{op}: {name} is {t.dtype.name}, {op} works on {self.dtype.name}")
        if t.layout not in layouts:
            takes = " or ".join(layouts)
            raise ValueError(f"{op}: {name} is {t.layout}, {op} takes {takes} tensors here: pass x.contiguous() "
                             f"(torch) or cuopjit.contiguous(x)" if CONTIGUOUS in layouts else
                             f"{op}: {name} is {t.layout}, {op} takes {takes} tensors here")
        if ndim is not None and t.ndim != ndim:
            raise ValueError(f"{op}: {name} must be {ndim}-D, got shape {list(t.shape)}")
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise ValueError(f"{op}: {name} has shape {list(t.shape)}, expected {list(shape)}")
        if t.device != driver.current_ordinal():
            raise ValueError(f"{op}: {name} is on device {t.device} but the current device is "
                             f"{driver.current_ordinal()}: call cuopjit.set_device({t.device})")
        t.ensure_live()
        return t

    # --- work figures for profiles ------------------------------------------------------------
    def work(self, *args: Any, **kwargs: Any) -> tuple[float, float]:
        """(floating-point operations, bytes moved) of one forward with these arguments."""
        return 0.0, 0.0


_TAGS = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16"}
HALF_DTYPES = ("float16", "bfloat16")   # stored in 16 bits, computed in float32
_SUFFIXES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16"}


def typed(base: type[Operator], name: str, what: str, dtypes: Sequence[str] = ("float32", "float64")) -> tuple:
    """`base`'s concrete classes, one per dtype, named as cuOP names them (`name` + Float, Double, Half,
    BFloat16) and belonging to base's module: `GemmFloat, GemmDouble = typed(Gemm, "Gemm", "GEMM")` there."""
    module = base.__module__
    classes = []
    for dt in dtypes:
        cls = name + _SUFFIXES[dt]
        computed = ", computed in float32" if dt in HALF_DTYPES else ""
        classes.append(type(base)(cls, (base,), {"dtype": np.dtype(dt), "__module__": module, "__qualname__": cls,
                                                 "__doc__": f"{dt} {what}{computed} (cuOP `{cls}`)."}))
    return tuple(classes)
_STORAGE = {"float32": "float", "float64": "double", "float16": "half_t", "bfloat16": "bf16_t"}


def dtype_tag(dtype: np.dtype) -> str:
    """'f32' / 'f64' / 'f16' / 'bf16' for readable kernel names."""
    return _TAGS[np.dtype(dtype).name]


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel computes in: float32 for the 16-bit types (read exactly, rounded once on store)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.name in HALF_DTYPES else dtype


def scalar_t(dtype: np.dtype) -> str:
    """The CUDA C type a kernel of this dtype computes in (templates' scalar_t: float for the 16-bit types)."""
    return "float" if compute_dtype(dtype) == np.float32 else "double"


def storage_t(dtype: np.dtype) -> str:
    """The CUDA C type a tensor of this dtype is stored as (templates' elem_t; half_t / bf16_t: half.cuh)."""
    return _STORAGE[np.dtype(dtype).name]


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


def vector_width(dtype: np.dtype) -> int:
    """Scalars in one 16-byte access: 4 float, 2 double, 8 float16 / bfloat16."""
    return 16 // np.dtype(dtype).itemsize
