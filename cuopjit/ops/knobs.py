"""The JITConfig values each family's kernels can honour, in one table, and the one message for any other value.

GEMM-shaped families and Conv2D validate tile and block sizes against their kernel shapes (see their
`shapes` modules); the families here take a knob as a count (elements per thread, threads per block),
so a table of allowed values is the whole rule. A value no kernel honours raises before anything is
planned, saying what to choose.
"""
from __future__ import annotations

from typing import Any

SMALL_TILES = (0, 8, 16, 32, 64, 128)          # elements per thread per step; 0 = automatic
BLOCKS = (0, 32, 64, 128, 256, 512, 1024)       # threads per block; 0 = automatic

KNOBS: dict[str, dict[str, tuple[int, ...]]] = {
    "streaming kernels": {"tile_size": SMALL_TILES},       # elementwise, BLAS-1, shape copies
    "row kernels": {"tile_size": SMALL_TILES, "block_size": BLOCKS},   # softmax, layer norm
    "pooling kernels": {"tile_size": SMALL_TILES},
    "batch norm": {"tile_size": SMALL_TILES},
}


def unavailable(field: str, value: Any, family: str, choices: tuple, note: str = "0 = automatic") -> ValueError:
    """The error for a config value a family cannot honour: names the field, the value, the family and the choices."""
    listed = ", ".join(map(str, choices))
    return ValueError(f"{field}={value} is not available for {family}: choose one of {listed}"
                      + (f" ({note})" if note else ""))


def check(family: str, cfg: Any) -> None:
    """Raise `unavailable` for the first field of `cfg` (a ConfigSnapshot) outside KNOBS[family]."""
    for field, choices in KNOBS[family].items():
        value = getattr(cfg, field)
        if value not in choices:
            raise unavailable(field, value, family, choices)
