"""JIT* wrappers: a JITConfig, the persistent-cache switch, auto-tuning and a performance profile.

A wrapper owns no kernels and never changes the operator it wraps: each forward passes the
wrapper's own RunSettings to the operator, whose plan memo keys on them, so two wrappers around
one operator (and the bare operator) each run their own kernels. Timing costs two event records,
so only the first forward and the forward after each `get_performance_profile()` are timed.
"""
from __future__ import annotations

import os
from typing import Any, ClassVar

from . import listing
from .run import executor
from .device import streams
from .config import DEFAULT, JITConfig, RunSettings, get_default_global_jit_config, global_generation
from .ops import (BatchMatMulDouble, BatchMatMulFloat, BatchNormDouble, BatchNormFloat, Convolution2DDouble,
                  Convolution2DFloat, GemmDouble, GemmFloat, GemvDouble, GemvFloat, LayerNormDouble, LayerNormFloat,
                  MatMulDouble, MatMulFloat, ReluDouble, ReluFloat, SoftmaxDouble, SoftmaxFloat, SymmDouble,
                  SymmFloat, TrsmDouble, TrsmFloat)
from .ops import ElementwiseDouble, ElementwiseFloat
from .ops import LayerNormBFloat16, LayerNormHalf, SoftmaxBFloat16, SoftmaxHalf
from .ops import (BatchNormBFloat16, BatchNormHalf, ElementwiseBFloat16, ElementwiseHalf, ReluBFloat16,
                  ReluHalf)
from .ops import GemvBFloat16, GemvHalf
from .ops import (BatchMatMulBFloat16, BatchMatMulHalf, GemmBFloat16, GemmHalf, MatMulBFloat16,
                  MatMulHalf)
from .ops import AttentionBFloat16, AttentionDouble, AttentionFloat, AttentionHalf
from .ops import Convolution2DBFloat16, Convolution2DHalf
from .ops.base import Operator
from .operands import call_key, operands, resolve
from .interop import READERS
from .device.events import EventPair
from .profile import PerformanceProfile
from .target import named as named_target

_GLOBAL = get_default_global_jit_config()
_foreign = READERS.get   # type -> key reader of a foreign array type seen before (None: Tensor, number)
_CALLERS: dict[tuple[type, type], str] = {}   # how errors name a wrapper's operator: 'JITGemmFloat(GemmFloat)'
_NO_PLANS: dict = {}


class JITWrapper:
    """Base of JITGemmFloat & co.: `forward` runs the wrapped operator under this wrapper's settings."""

    operator_type: ClassVar[type[Operator]] = Operator

    def __init__(self, operator: Operator):
        if not isinstance(operator, self.operator_type):
            raise TypeError(f"{type(self).__name__} wraps a {self.operator_type.__name__}, "
                            f"got {type(operator).__name__}")
        self.operator = operator
        self._config = JITConfig()
        self._jit = True
        self._persistent = True
        self._directory: str | None = None
        self._version = 0           # bumped by every setter: settings are rebuilt only then
        self._state: tuple | None = None
        self._settings = DEFAULT
        self._memo = _NO_PLANS    # the operator's plan memo for self._settings, once a forward ran
        self._events: EventPair | None = None
        self._time_next = True
        self._profile = PerformanceProfile()
        self._last: tuple = (None, (), {})      # (runner, args, kwargs) of the last forward
        self._timed: tuple | None = None        # (runner, args, kwargs) of the last timed forward

    # --- the cuOP JIT API -------------------------------------------------------------------
    def enable_jit(self, enable: bool = True) -> None:
        """False runs the operator's default kernel instead of one specialised by this wrapper's config."""
        self._jit = bool(enable)
        self._version += 1

    def enable_persistent_cache(self, enable: bool = True) -> None:
        """False keeps compiled kernels in this process only (nothing read from or written to disk)."""
        self._persistent = bool(enable)
        self._version += 1

    def set_persistent_cache_directory(self, path: str | os.PathLike) -> None:
        """Keep this wrapper's cubins in `path` instead of the global cache directory."""
        self._directory = os.fspath(path)
        self._version += 1

    def set_epilogue(self, expression: Any, **bound: Any) -> None:
        """The wrapped operator's `set_epilogue` (an epilogue belongs to the operator: every wrapper of it sees it)."""
        self.operator.set_epilogue(expression, **bound)

    def set_jit_config(self, config: JITConfig) -> None:
        """Use `config` from the next forward on (a copy: later edits do not leak in).

        Raises ValueError at once for a value no kernel of the operator can honour (checked on the
        family's first representative problem of this dtype); shape-dependent limits raise at forward.
        """
        if not isinstance(config, JITConfig):
            raise TypeError(f"set_jit_config takes a cuopjit.JITConfig, got {type(config).__name__}")
        family = self.operator.family
        problem = next((p for p in family.problems() if p.dtype == self.operator.dtype.name), None)
        if problem is not None:
            family.choices(problem, config.snapshot(), named_target("sm_90"))
        self._config = config.copy()
        self._version += 1

    def get_jit_config(self) -> JITConfig:
        return self._config.copy()

    def get_performance_profile(self) -> PerformanceProfile:
        """Time, GFLOP/s and GB/s of the last timed forward (waits for it), which kernels ran and on which units.

        The first forward is timed, and so is the forward after each call of this method.
        """
        p = self._profile
        if self._timed is not None and self._events is not None:
            run, args, kwargs = self._timed
            p.execution_time = self._events.elapsed_ms()
            seconds = p.execution_time * 1e-3
            flops, nbytes = self.operator.work(*args, **kwargs)
            p.gflops = flops / seconds / 1e9 if seconds else 0.0
            p.bandwidth_gbps = nbytes / seconds / 1e9 if seconds else 0.0
        run = self._last[0]
        if run is not None:
            runner = executor.runner_of(run)
            p.kernel_name, p.units, p.plan_choice = runner.kernel_names, runner.units, runner.plan.choice
            if runner.kernels:
                infos = [k.info for k in runner.kernels]
                p.cache_hit = all(i.cache_hit for i in infos)
                p.build_time = sum(i.seconds for i in infos) * 1e3
                p.registers = infos[0].registers
        self._time_next = True
        return p

    def get_kernel_source(self, *args: Any, arch: str | None = None, what: str = "cuda", **kwargs: Any) -> str:
        """The CUDA C (`what="ptx"`: PTX, `"sass"`: SASS) of every launch `forward(*args, **kwargs)` would run
        under this wrapper's settings, each under `cuopjit show`'s header; no GPU needed (see cuopjit.show)."""
        return listing.kernel_text(self.operator, self._current_settings(), args, kwargs, arch, what)

    # --- running ------------------------------------------------------------------------------
    @property
    def run_settings(self) -> RunSettings:
        """The settings this wrapper's forwards plan under now (its JITConfig under the global switches): the
        key of the wrapped operator's plan memo (`operator.memo(settings)`)."""
        return self._current_settings()

    def _current_settings(self) -> RunSettings:
        """This wrapper's settings under the global switches (rebuilt only when a setter or one of them ran)."""
        glob = _GLOBAL
        state = (self._version, global_generation())
        if state != self._state:
            use_jit = self._jit and self._config.enable_jit and glob.enable_jit
            config = self._config.snapshot() if use_jit else DEFAULT.config
            self._settings = RunSettings.of(config, self._directory, self._persistent and glob.enable_caching,
                                            use_jit and glob.enable_auto_tuning)
            self._memo = _NO_PLANS      # the operator's memo is looked up at the first forward
            self._state = state
        return self._settings

    def forward(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        """Run the wrapped operator under this wrapper's settings on `stream` (default: the current stream)."""
        if stream is None:
            s = streams.local.stream
        else:
            recent = streams.recent[0]
            s = recent[1] if stream is recent[0] else streams.handle(stream)
        if (self._version, global_generation()) != self._state:
            self._current_settings()
        op = self.operator
        if args and _foreign(type(args[0])) is not None:   # a torch / CuPy / JAX array: one probe on the reads
            try:
                run, pointers, recipe = op.foreign_plans[(self._settings, call_key(args, kwargs))]
                result = args[recipe] if type(recipe) is int else resolve(recipe, args, kwargs)
            except (LookupError, TypeError):
                run = None
        else:
            try:
                key, pointers, result = op.bind(*args, **kwargs)
                run = self._memo[key]
            except (LookupError, AttributeError, TypeError):
                run = None
        if run is None:   # foreign arrays, a new problem or a bad argument (its error chains no internal one)
            kinds = (type(self), type(op))
            caller = _CALLERS.get(kinds) or _CALLERS.setdefault(kinds, f"{kinds[0].__name__}({kinds[1].__name__})")
            run, pointers, result = op.prepared(self._settings, s, args, kwargs, caller)
            self._memo = op.memo(self._settings)
        if self._time_next:
            events = self._events
            if events is None:
                events = self._events = EventPair()
            events.record_start(s)
            run(pointers, s)
            events.record_end(s)
            swapped = operands(args, kwargs)      # the work figures read Tensors
            self._timed = (run, args, kwargs) if swapped is None else (run, *swapped[:2])
            self._time_next = False
        else:
            run(pointers, s)
        self._last = (run, args, kwargs)
        self._profile.calls += 1
        return result

    __call__ = forward


def _wrapper(operator_type: type[Operator]) -> type[JITWrapper]:
    """The named JIT wrapper of the cuOP API for one operator class: JIT + its name, in this module."""
    name = "JIT" + operator_type.__name__
    return type(name, (JITWrapper,), {"operator_type": operator_type, "__module__": __name__, "__qualname__": name,
                                      "__doc__": f"{operator_type.__name__} run under the wrapper's own JITConfig."})


# The named JIT wrappers of the cuOP API, one per operator class.
JITGemmFloat = _wrapper(GemmFloat)
JITGemmDouble = _wrapper(GemmDouble)
JITGemmHalf = _wrapper(GemmHalf)
JITGemmBFloat16 = _wrapper(GemmBFloat16)
JITGemvFloat = _wrapper(GemvFloat)
JITGemvDouble = _wrapper(GemvDouble)
JITMatMulFloat = _wrapper(MatMulFloat)
JITMatMulDouble = _wrapper(MatMulDouble)
JITMatMulHalf = _wrapper(MatMulHalf)
JITMatMulBFloat16 = _wrapper(MatMulBFloat16)
JITBatchMatMulFloat = _wrapper(BatchMatMulFloat)
JITBatchMatMulDouble = _wrapper(BatchMatMulDouble)
JITBatchMatMulHalf = _wrapper(BatchMatMulHalf)
JITBatchMatMulBFloat16 = _wrapper(BatchMatMulBFloat16)
JITSymmFloat = _wrapper(SymmFloat)
JITSymmDouble = _wrapper(SymmDouble)
JITTrsmFloat = _wrapper(TrsmFloat)
JITTrsmDouble = _wrapper(TrsmDouble)
JITReluFloat = _wrapper(ReluFloat)
JITReluDouble = _wrapper(ReluDouble)
JITReluHalf = _wrapper(ReluHalf)
JITReluBFloat16 = _wrapper(ReluBFloat16)
JITSoftmaxFloat = _wrapper(SoftmaxFloat)
JITSoftmaxDouble = _wrapper(SoftmaxDouble)
JITLayerNormFloat = _wrapper(LayerNormFloat)
JITLayerNormDouble = _wrapper(LayerNormDouble)
JITSoftmaxHalf = _wrapper(SoftmaxHalf)
JITSoftmaxBFloat16 = _wrapper(SoftmaxBFloat16)
JITLayerNormHalf = _wrapper(LayerNormHalf)
JITLayerNormBFloat16 = _wrapper(LayerNormBFloat16)
JITBatchNormFloat = _wrapper(BatchNormFloat)
JITBatchNormDouble = _wrapper(BatchNormDouble)
JITBatchNormHalf = _wrapper(BatchNormHalf)
JITBatchNormBFloat16 = _wrapper(BatchNormBFloat16)
JITConvolution2DFloat = _wrapper(Convolution2DFloat)
JITConvolution2DDouble = _wrapper(Convolution2DDouble)
JITElementwiseFloat = _wrapper(ElementwiseFloat)
JITElementwiseDouble = _wrapper(ElementwiseDouble)
JITElementwiseHalf = _wrapper(ElementwiseHalf)
JITElementwiseBFloat16 = _wrapper(ElementwiseBFloat16)
JITGemvHalf = _wrapper(GemvHalf)
JITGemvBFloat16 = _wrapper(GemvBFloat16)
JITAttentionFloat = _wrapper(AttentionFloat)
JITAttentionDouble = _wrapper(AttentionDouble)
JITAttentionHalf = _wrapper(AttentionHalf)
JITAttentionBFloat16 = _wrapper(AttentionBFloat16)
JITConvolution2DHalf = _wrapper(Convolution2DHalf)
JITConvolution2DBFloat16 = _wrapper(Convolution2DBFloat16)
