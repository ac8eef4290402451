"""The layers of DESIGN.md as checked contracts: `lint-imports` (import-linter) over pyproject's contracts.

A broken contract (an upward import, cuda.bindings outside cuopjit.device, torch outside cuopjit.torch,
an import cycle) fails CI with import-linter's explanation of the offending import chain.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = {"torch", "matplotlib", "cuda", "platformdirs"}   # imported where used: see each import's comment


def test_import_contracts_hold():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install '.[test]')")
    out = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "BROKEN" not in out.stdout and "4 kept, 0 broken" in out.stdout, out.stdout[-2000:]


def _function_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    found.append((node.lineno, node.module or ""))
                elif isinstance(node, ast.ImportFrom):
                    found.append((node.lineno, "." * node.level + (node.module or "")))
                elif isinstance(node, ast.Import):
                    found.extend((node.lineno, a.name) for a in node.names)
    return found


def test_function_local_imports_are_only_for_optional_or_lazy_dependencies():
    """Inside functions cuopjit imports only optional packages or the CUDA binding (import never loads the
    driver library); everything of its own is imported at the top of the module."""
    wrong = [f"{p.relative_to(ROOT)}:{line} imports {mod}"
             for p in sorted((ROOT / "cuopjit").rglob("*.py"))
             for line, mod in _function_imports(p)
             if mod.split(".")[0] not in OPTIONAL and mod not in ("importlib", "importlib.metadata")]
    assert not wrong, "\n".join(wrong)
