"""The expression language of fused epilogues and elementwise kernels: parse, check, canonicalise, generate.

A leaf layer: it imports only the standard library, NumPy and cuopjit.errors.

Grammar (Python syntax, checked against a whitelist; at most 2,000 characters, printable ASCII)::

    expr   := number | name | expr (+ | - | * | /) expr | -expr | +expr | (expr) | call
    call   := relu(x) | leaky_relu(x, slope) | gelu(x) | gelu_tanh(x) | silu(x) | sigmoid(x) | tanh(x)
            | exp(x) | log(x) | sqrt(x) | rsqrt(x) | abs(x) | min(a, b) | max(a, b) | clamp(x, lo, hi)
            | where(cond, a, b)
    cond   := expr (< | <= | > | >= | == | !=) expr | cond and cond | cond or cond | not cond | (cond)
    program := name = expr { (; | newline) name = expr }

Numbers are int or float literals (all become floating point); names are ASCII identifiers that do
not start with `_`, are not function names, C keywords or nan/inf. Nothing else is accepted (no
attributes, subscripts, strings, `**`, `%`, keyword arguments, comments, braces, ...): each refusal
is one `ExpressionError` line (a `CuopjitError` and `ValueError`) naming the culprit and what is allowed.

Epilogues read `acc` (the product after alpha), `c` (the output's previous value) and operands,
each of a kind (operands.py): "scalar" (a number passed as a kernel parameter), "per_column" (one
value per output column n / channel), "per_row" (one per output row m), "full" (output-shaped).

Use::

    e = parse_epilogue("relu(acc * scale + shift + residual)")
    e.operands                                   # ('scale', 'shift', 'residual')
    kinds = {n: infer_kind(n, shape[n], out_shape) for n in e.operands}
    key = epilogue_key(e, kinds)                 # canonical tree + kinds: into the plan / cache key
    code = generate(e, {"acc": "v", "scale": "scale_p[n]", ...}, "float")
    # template: {{ code.prelude }} at file scope; `out = {{ code.expr }};` in the kernel
    ref = evaluate(e, {"acc": a, "scale": s, ...}, np.float64)

    p = parse_program("a = x * 2; b = relu(a + y)")
    p.inputs, p.outputs                          # ('x', 'y'), ('a', 'b')
    g = generate_program(p, {"x": "x_p[i]", "y": "y_p[i]"}, "double")
    # g.prelude at file scope; g.body in the kernel; then store g.results[k] to output k
    evaluate_program(p, {"x": x, "y": y})        # {'a': ..., 'b': ...}
"""
from .cuda import SCALARS, CudaCode, CudaProgram, generate, generate_program, literal, prelude
from .numpy_eval import evaluate, evaluate_program
from .operands import FULL, KINDS, PER_COLUMN, PER_ROW, SCALAR, check_kinds, epilogue_key, infer_kind
from .parse import MAX_LENGTH, RESERVED, Expression, Program, parse_epilogue, parse_program
from .tree import FUNCTIONS, ExpressionError, canonical

__all__ = [
    "SCALARS", "CudaCode", "CudaProgram", "generate", "generate_program", "literal", "prelude",
    "evaluate", "evaluate_program",
    "FULL", "KINDS", "PER_COLUMN", "PER_ROW", "SCALAR", "check_kinds", "epilogue_key", "infer_kind",
    "MAX_LENGTH", "RESERVED", "Expression", "Program", "parse_epilogue", "parse_program",
    "FUNCTIONS", "ExpressionError", "canonical",
]
