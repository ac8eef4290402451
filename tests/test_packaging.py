"""The wheel carries the templates and the console script, so an installed cuopjit finds its kernels."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from cuopjit.build import codegen

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_every_template_and_the_cli(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    wheel = next(tmp_path.glob("cuopjit-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for template in ["common/common.cuh.jinja", *codegen.template_names()]:
        assert f"cuopjit/templates/{template}" in names, f"{template} missing from {wheel.name}"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "cuopjit = cuopjit.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
