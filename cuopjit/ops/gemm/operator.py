"""GemmFloat / GemmDouble: C = alpha * op(A) @ op(B) + beta * C, row-major, any M, N, K >= 0; or a user epilogue
(`set_epilogue`, cuopjit/ops/epilogue_operator.py) over acc = alpha * op(A) @ op(B), the old C and operands.

A and the weight B may be transposed views (layout "transposed": torch's `W.T` of a contiguous W): such an
operand is read where it lies, as the GEMM problem's trans_a / trans_b flipped (`Linear`'s `x @ W.T` is the
trans_b GEMM on W as stored), never copied."""
from __future__ import annotations


from ...layout import CONTIGUOUS, TRANSPOSED
from ...tensor import Tensor
from . import plans as gemm_plans
from ..base import HALF_DTYPES, Operator, vector_width, typed
from ..epilogue_operator import Fusable
from ..params import ScaledProduct


_LAYOUTS = (CONTIGUOUS, TRANSPOSED)


class Gemm(Fusable, ScaledProduct, Operator):
    """General matrix multiply. `set_weight(B)` fixes B; `forward(A, C, **operands)` writes C and returns it.

    K = 0 gives C = beta * C (C = 0 when beta is 0; with an epilogue, acc = 0); M or N = 0 launches nothing.
    `set_epilogue(expr, **bound)`: C = expr over acc, c and operands (bias [N] per column, [M, 1] per row, ...).
    """

    family = gemm_plans.FAMILY
    forward_names = ("a", "c")

    def __init__(self, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0, beta: float = 0.0):
        super().__init__()
        self._trans_a, self._trans_b = bool(trans_a), bool(trans_b)
        self._init_scales(alpha, beta)
        self._settings_changed()

    @property
    def trans_a(self) -> bool:
        return self._trans_a

    @property
    def trans_b(self) -> bool:
        return self._trans_b

    def set_weight(self, weight: Tensor) -> None:
        """B, the right-hand matrix (N×K when trans_b, else K×N)."""
        self._weight = self.check_operand("weight", weight, ndim=2, layouts=_LAYOUTS)
        self._settings_changed()

    def _plan_settings(self) -> tuple:
        """The transposes, alpha, beta and the weight's shape, device, alignment and layout decide the plan."""
        layout = None if self._weight is None else self._weight.layout
        return self._trans_a, self._trans_b, self._alpha, self._beta, self._weight_key(), layout

    def bind(self, a: Tensor, c: Tensor) -> tuple:
        return (a.plan_key, c.plan_key, self._state), (a.ptr, self._weight.ptr, c.ptr), c

    def problem(self, a: Tensor, c: Tensor, **operands) -> gemm_plans.GemmProblem | None:
        name = type(self).__name__
        b = self._weight
        if b is None:
            raise ValueError(f"{name}: no weight: call set_weight(B) before forward")
        a = self.check_operand("a", a, ndim=2, layouts=_LAYOUTS)
        self.check_operand("c", c, ndim=2)
        self.check_operand("weight", b, ndim=2, layouts=_LAYOUTS)
        m, k = a.shape[::-1] if self._trans_a else a.shape
        kb, n = b.shape[::-1] if self._trans_b else b.shape
        if k != kb:
            raise ValueError(f"{name}: a has shape {list(a.shape)} and weight has shape {list(b.shape)}: "
                             f"op(a) has {k} columns but op(weight) has {kb} rows")
        if tuple(c.shape) != (m, n):
            raise ValueError(f"{name}: c has shape {list(c.shape)}, expected {[m, n]} "
                             f"(a {list(a.shape)} @ weight {list(b.shape)})")
        fused = self.epilogue_key((m, n), operands)
        if m == 0 or n == 0:
            return None
        vec = vector_width(self.dtype)
        # a transposed view lies as the other flag would: the stored matrix's rows are its logical columns
        ta, tb = self._trans_a != (a.layout == TRANSPOSED), self._trans_b != (b.layout == TRANSPOSED)
        lda, ldb, ldc = (m if ta else k), (k if tb else n), n
        aligned = ((a.ptr | b.ptr | c.ptr) & 15) == 0 and lda % vec == 0 and ldb % vec == 0 and ldc % vec == 0
        return gemm_plans.GemmProblem(self.dtype.name, m, n, k, ta, tb, aligned, self._alpha, self._beta, lda, ldb,
                                        ldc, epilogue=fused)

    def work(self, a: Tensor, c: Tensor, **operands) -> tuple[float, float]:
        m, n = c.shape
        k = a.shape[0] if self._trans_a else a.shape[1]
        reads_c = self._beta if self._fused is None else "c" in self._fused.names
        return 2.0 * m * n * k, float((a.size + self._weight.size + c.size * (2 if reads_c else 1))
                                      * self.dtype.itemsize + self.epilogue_bytes(operands))


GemmFloat, GemmDouble = typed(Gemm, "Gemm", "GEMM")
GemmHalf, GemmBFloat16 = typed(Gemm, "Gemm", "GEMM", HALF_DTYPES)


