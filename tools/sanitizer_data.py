"""What the tools/sanitize_*.py scripts of the 16-bit kernels share: one seeded generator, random 16-bit data
(drawn in float32, rounded once to the dtype) and a check against a float64 reference."""
import numpy as np

rng = np.random.default_rng(0)


def half(shape, dtype, scale=1.0, offset=0.0):
    """Normal data times `scale` plus `offset`, rounded to `dtype` (float16 or ml_dtypes.bfloat16)."""
    return (rng.standard_normal(shape) * scale + offset).astype(np.float32).astype(dtype)


def close(got, want, tol, what, relative=True):
    """The largest error (relative to max(1, |want|) unless `relative` is False) at most `tol`."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want).max() / (max(1.0, np.abs(want).max()) if relative else 1.0)
    assert err <= tol, (what, err)
