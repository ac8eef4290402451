"""Parse user text with Python's `ast` against a whitelist into a tree (see tree.py).

`parse_epilogue` takes one expression over `acc`, `c` and operand names; `parse_program` takes
`name = expression` statements separated by `;` or newlines. Anything outside the language raises
one ExpressionError line naming the culprit, where it is and what is allowed.
"""
from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from functools import cached_property

from .tree import (FUNCTIONS, BinOp, BoolOp, Call, Compare, ExpressionError, Name, Neg, Node, Not, Num,
                   canonical, names)

MAX_LENGTH = 2000      # characters of user text, an epilogue or a whole program
MAX_DEPTH = 200        # nesting of the syntax tree; keeps generation and evaluation far from recursion limits
MAX_NAME = 64
RESERVED = ("acc", "c")  # an epilogue's own names: the product after alpha, the output's previous value
ALLOWED = ("allowed: numbers, names, + - * /, unary -, where(cond, a, b) with < <= > >= == != (and/or/not) "
           "in cond, and " + ", ".join(f"{f}({', '.join(p)})" for f, p in FUNCTIONS.items() if f != "where"))
_C_WORDS = frozenset("""asm auto bool break case catch char class const const_cast constexpr continue decltype
    default delete do double dynamic_cast else enum explicit export extern false float for friend goto half if
    inline int long mutable namespace new noexcept nullptr operator private protected public register
    reinterpret_cast restrict return short signed sizeof static static_assert static_cast struct switch template
    this throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
    threadIdx blockIdx blockDim gridDim warpSize""".split())
_NOT_FINITE_NAMES = frozenset(("nan", "inf", "infinity"))
_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_BAD_OPS = {ast.Pow: "** (power; write x * x, or exp(y * log(x)))", ast.Mod: "% (modulo)",
            ast.FloorDiv: "// (floor division)", ast.MatMult: "@ (matrix product)", ast.BitAnd: "& (bit and)",
            ast.BitOr: "| (bit or)", ast.BitXor: "^ (bit xor)", ast.LShift: "<< (shift)", ast.RShift: ">> (shift)",
            ast.Invert: "~ (bit not)", ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}
_BAD_NODES = {"Attribute": "attribute access", "Subscript": "subscripts", "Lambda": "lambdas",
              "ListComp": "comprehensions", "SetComp": "comprehensions", "DictComp": "comprehensions",
              "GeneratorExp": "generator expressions", "NamedExpr": "assignment expressions (:=)",
              "Dict": "dicts", "Set": "sets", "List": "lists", "Tuple": "tuples", "JoinedStr": "f-strings",
              "Starred": "starred expressions", "Await": "await", "Yield": "yield", "YieldFrom": "yield",
              "Slice": "slices", "IfExp": "conditional expressions (use where(cond, a, b))"}
_BAD_STATEMENTS = {ast.AugAssign: "augmented assignment (+= and the like)", ast.AnnAssign: "annotations",
                   ast.Import: "import statements", ast.ImportFrom: "import statements"}
_ASSIGN = re.compile(r"(?<![=<>!:])=(?!=)")


@dataclass(frozen=True)
class Expression:
    """One parsed expression. Equal (and hashed) by tree, so two spellings of one meaning are equal."""
    tree: Node
    text: str = field(default="", compare=False, repr=False)

    @cached_property
    def canonical(self) -> str:
        """Spelling-independent string of the tree: what enters cache keys."""
        return canonical(self.tree)

    @property
    def names(self) -> tuple[str, ...]:
        """Every name read, in order of first appearance (acc and c included)."""
        return names(self.tree)

    @property
    def operands(self) -> tuple[str, ...]:
        """The names the caller must supply: every name read except the reserved `acc` and `c`."""
        return tuple(n for n in self.names if n not in RESERVED)


@dataclass(frozen=True)
class Program:
    """An elementwise program: `(output, tree)` statements in order; later ones may read earlier outputs."""
    statements: tuple[tuple[str, Node], ...]
    text: str = field(default="", compare=False, repr=False)

    @cached_property
    def canonical(self) -> str:
        """'a=(x*2.0); b=relu((a+y))': spelling-independent, parses back to the same program."""
        return "; ".join(f"{out}={canonical(tree)}" for out, tree in self.statements)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The assigned names, in statement order."""
        return tuple(out for out, _ in self.statements)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The names read and never assigned, in order of first appearance."""
        return tuple(dict.fromkeys(n for _, t in self.statements for n in names(t) if n not in self.outputs))


def parse_epilogue(text: str) -> Expression:
    """Parse one epilogue expression, e.g. 'relu(acc * scale + shift)'; raises ExpressionError."""
    p = _Parser(text, "epilogue")
    p.precheck(semicolons=False)
    body = text.strip()
    try:
        root = ast.parse(body, mode="eval")
    except SyntaxError as e:
        if _ASSIGN.search(body):
            p.fail("assignments (=) are not allowed in an epilogue, it is one expression such as relu(acc + bias)")
        p.fail(f"syntax error at column {(e.offset or 0) + len(text) - len(text.lstrip())}: {e.msg}")
    except (RecursionError, MemoryError):
        p.fail(f"the expression nests too deeply (at most {MAX_DEPTH} levels)")
    p.check_depth(root)
    return Expression(p.value(root.body), text)


def parse_program(text: str) -> Program:
    """Parse an elementwise program, 'a = x * 2; b = relu(a + y)'; raises ExpressionError."""
    p = _Parser(text, "program")
    p.precheck(semicolons=True)
    try:
        root = ast.parse(textwrap.dedent(text).strip(), mode="exec")
    except SyntaxError as e:
        p.fail(f"syntax error at line {e.lineno}, column {e.offset}: {e.msg}")
    except (RecursionError, MemoryError):
        p.fail(f"the program nests too deeply (at most {MAX_DEPTH} levels)")
    p.check_depth(root)
    targets = [p.target(stmt) for stmt in root.body]
    statements: list[tuple[str, Node]] = []
    for out, stmt in zip(targets, root.body):
        tree = p.value(stmt.value)
        assigned = [o for o, _ in statements]
        if out in assigned:
            p.fail(f"'{out}' is assigned twice; assign each output once", stmt)
        early = [n for n in names(tree) if n in targets and n not in assigned]
        if early:
            p.fail(f"'{early[0]}' is read before it is assigned; name outputs apart from inputs "
                   f"(e.g. out = relu(x), not x = relu(x))", stmt)
        statements.append((out, tree))
    prog = Program(tuple(statements), text)
    if not prog.inputs:
        p.fail("the program reads no input; at least one name must be an operand")
    return prog


class _Parser:
    """Converts a whitelisted `ast` into tree nodes; every refusal goes through `fail`."""

    def __init__(self, text, what: str):
        self.text, self.what = text, what

    def fail(self, problem: str, node: ast.AST | None = None):
        short = self.text if len(self.text) <= 60 else self.text[:57] + "..."
        where = f" (line {node.lineno}, column {node.col_offset + 1})" if node is not None else ""
        raise ExpressionError(f"{self.what} {short!r}: {problem}{where}") from None

    def segment(self, node: ast.AST) -> str:
        src = textwrap.dedent(self.text).strip() if self.what == "program" else self.text.strip()
        seg = " ".join((ast.get_source_segment(src, node) or type(node).__name__).split())
        return seg if len(seg) <= 40 else seg[:37] + "..."

    def precheck(self, semicolons: bool) -> None:
        """Refuse what never belongs in the language before Python's parser sees it."""
        if not isinstance(self.text, str):
            raise ExpressionError(f"{self.what} must be a str, got {type(self.text).__name__}")
        if len(self.text) > MAX_LENGTH:
            raise ExpressionError(f"{self.what} is {len(self.text)} characters long; at most {MAX_LENGTH} "
                                  "are allowed")
        if not self.text.strip():
            self.fail("it is empty; write an expression such as relu(acc + bias)" if self.what == "epilogue"
                      else "it is empty; write statements such as out = relu(x + y)")
        for i, ch in enumerate(self.text):
            at = f"at character {i + 1}"
            if ch in "'\"":
                self.fail(f"strings (quotes) are not allowed, {at}; {ALLOWED}")
            if ch == "#":
                self.fail(f"comments (#) are not allowed, {at}")
            if ch in "{}":
                self.fail(f"braces ({ch}) are not allowed, {at}; group with parentheses")
            if ch == ";" and not semicolons:
                self.fail(f"';' is not allowed, {at}: an epilogue is one expression")
            if ch == "\\":
                self.fail(f"backslashes are not allowed, {at}")
            if not ch.isascii() or (not ch.isprintable() and ch not in " \t\n\r"):
                self.fail(f"character {ch!r} is not allowed, {at}; only printable ASCII is")

    def check_depth(self, root: ast.AST) -> None:
        stack = [(root, 1)]
        while stack:
            node, depth = stack.pop()
            if depth > MAX_DEPTH:
                self.fail(f"it nests more than {MAX_DEPTH} levels deep")
            stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))

    def target(self, stmt: ast.stmt) -> str:
        """The one plain name a program statement assigns."""
        if isinstance(stmt, ast.Assign):
            if len(stmt.targets) != 1:
                self.fail("chained assignment (a = b = ...); assign one name per statement", stmt)
            tgt = stmt.targets[0]
            if not isinstance(tgt, ast.Name):
                self.fail(f"cannot assign to {self.segment(tgt)!r}; assign to a plain name", stmt)
            return self.name(tgt)
        if isinstance(stmt, ast.Expr):
            self.fail(f"statement {self.segment(stmt)!r} assigns nothing; write name = expression", stmt)
        what = _BAD_STATEMENTS.get(type(stmt), f"{type(stmt).__name__} statements")
        self.fail(f"{what} are not allowed; a program is statements name = expression", stmt)

    def name(self, node: ast.Name) -> str:
        """A name's id, after the naming rules that keep it a safe C identifier."""
        n = node.id
        if n in FUNCTIONS:
            self.fail(f"'{n}' is a function; call it as {n}({', '.join(FUNCTIONS[n])})")
        if n.startswith("_"):
            self.fail(f"name {n!r} starts with an underscore; names are letters, digits and _ starting with a letter")
        if len(n) > MAX_NAME:
            self.fail(f"name {n[:20]!r}... is {len(n)} characters long; at most {MAX_NAME} are allowed")
        if n.lower() in _NOT_FINITE_NAMES:
            self.fail(f"'{n}' is not a constant here; NaN and infinity cannot be written, pass them as scalar operands")
        if n in _C_WORDS:
            self.fail(f"'{n}' is a reserved word in CUDA C; choose another name")
        return n

    def number(self, node: ast.Constant) -> Num:
        v = node.value
        if isinstance(v, bool) or v is None or v is Ellipsis:
            self.fail(f"{v!r} is not allowed; {ALLOWED}")
        if isinstance(v, complex):
            self.fail(f"complex numbers ({self.segment(node)}) are not allowed")
        if not isinstance(v, (int, float)):
            self.fail(f"{type(v).__name__} constants are not allowed; {ALLOWED}")
        try:
            value = float(v)
        except OverflowError:
            value = float("inf")
        if value in (float("inf"), float("-inf")):
            self.fail(f"the number {self.segment(node)} overflows a double; write a finite number")
        return Num(value)

    def value(self, node: ast.AST) -> Node:
        """A value (number-valued) subexpression."""
        if isinstance(node, ast.Constant):
            return self.number(node)
        if isinstance(node, ast.Name):
            return Name(self.name(node))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.UAdd):
                return self.value(node.operand)
            if isinstance(node.op, ast.USub):
                inner = self.value(node.operand)
                return Num(-inner.value) if isinstance(inner, Num) else Neg(inner)
            if isinstance(node.op, ast.Not):
                self.fail(f"'not' in {self.segment(node)!r} is only allowed inside where()'s condition")
            self.fail(f"operator {_BAD_OPS[type(node.op)]} in {self.segment(node)!r} is not allowed; {ALLOWED}")
        if isinstance(node, ast.BinOp):
            op = _ARITH.get(type(node.op))
            if op is None:
                self.fail(f"operator {_BAD_OPS[type(node.op)]} in {self.segment(node)!r} is not allowed; "
                          "operators are + - * / and unary -")
            return BinOp(op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            self.fail(f"condition {self.segment(node)!r} is only allowed as where()'s first argument, "
                      "e.g. where(x > 0, x, 0)")
        what = _BAD_NODES.get(type(node).__name__, type(node).__name__)
        self.fail(f"{self.segment(node)!r} is not allowed ({what}); {ALLOWED}")

    def cond(self, node: ast.AST) -> Node:
        """where()'s condition: a comparison, or and/or/not of conditions."""
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                self.fail(f"chained comparison {self.segment(node)!r}; write (a < b) and (b < c)")
            op = _CMP.get(type(node.ops[0]))
            if op is None:
                self.fail(f"operator '{_BAD_OPS[type(node.ops[0])]}' in {self.segment(node)!r} is not allowed; "
                          "comparisons are < <= > >= == !=")
            return Compare(op, self.value(node.left), self.value(node.comparators[0]))
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            tree = self.cond(node.values[0])
            for v in node.values[1:]:
                tree = BoolOp(op, tree, self.cond(v))
            return tree
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return Not(self.cond(node.operand))
        self.fail(f"where()'s condition {self.segment(node)!r} is not a comparison; write e.g. where(x > 0, a, b)")

    def call(self, node: ast.Call) -> Node:
        f = node.func
        if isinstance(f, ast.Call):
            self.fail(f"calls of calls ({self.segment(node)!r}) are not allowed; {ALLOWED}")
        if not isinstance(f, ast.Name):
            self.fail(f"only the listed functions can be called, not {self.segment(f)!r}; {ALLOWED}")
        if f.id not in FUNCTIONS:
            self.fail(f"unknown function {f.id!r}; functions: {', '.join(FUNCTIONS)}")
        params = FUNCTIONS[f.id]
        sig = f"{f.id}({', '.join(params)})"
        if node.keywords:
            self.fail(f"keyword arguments in {self.segment(node)!r} are not allowed; call {sig} positionally")
        if any(isinstance(a, ast.Starred) for a in node.args):
            self.fail(f"starred arguments in {self.segment(node)!r} are not allowed; call {sig}")
        if len(node.args) != len(params):
            self.fail(f"{f.id}() takes {len(params)} argument{'s' * (len(params) > 1)}, {sig}, "
                      f"got {len(node.args)}")
        if f.id == "where":
            return Call("where", (self.cond(node.args[0]), self.value(node.args[1]), self.value(node.args[2])))
        return Call(f.id, tuple(self.value(a) for a in node.args))
