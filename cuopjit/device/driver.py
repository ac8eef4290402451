"""The CUDA driver: lazy cuInit, devices, primary contexts, modules and functions.

Nothing here runs at import. The first call that needs a GPU initialises the driver;
a machine without one gets `NoDeviceError` saying what still works without a GPU.
The current device is per thread (default 0), as in the CUDA runtime and PyTorch.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import threading
from dataclasses import dataclass

from .. import errors
from ..errors import ExecutionError, NoDeviceError, check

_lock = threading.Lock()
class _Thread(threading.local):
    """Per-thread driver state; class attributes are every new thread's defaults (no attribute miss)."""
    ordinal: int | None = None   # whose primary context cuopjit made current on this thread
    current = 0                  # the device set_device chose for this thread


_tls = _Thread()

_NO_GPU_HINT = ("cuopjit can still render, compile and prewarm kernels without one "
                "(e.g. `cuopjit prewarm --arch sm_90`)")


def api():
    """The cuda.bindings driver module, imported on first use (import never touches the GPU).

    Only modules of `cuopjit.device` call it; everything above uses their functions and objects."""
    from cuda.bindings import driver
    return driver


def _describe(err) -> str:
    """The driver's description of a CUresult (for `errors.check`'s messages)."""
    _, desc = api().cuGetErrorString(err)
    return desc.decode() if isinstance(desc, bytes) else ""


errors.set_describer(_describe)


@functools.cache
def _init() -> int:
    """cuInit once; returns the device count, or raises NoDeviceError."""
    try:
        drv = api()
        err, = drv.cuInit(0)
    except Exception as exc:  # the driver library itself is missing
        raise NoDeviceError(f"no NVIDIA driver found ({exc.__class__.__name__}): tensors and forward need an "
                            f"NVIDIA GPU; {_NO_GPU_HINT}", "CUDA_ERROR_NO_DEVICE") from None
    if int(err) != 0:
        raise NoDeviceError(f"the NVIDIA driver could not start ({err.name}): tensors and forward need a working "
                            f"NVIDIA GPU; {_NO_GPU_HINT}", err.name)
    return check(drv.cuDeviceGetCount(), "cuDeviceGetCount")


def device_count() -> int:
    """Number of visible GPUs; 0 on a machine with no driver or GPU (never raises for that)."""
    try:
        return _init()
    except NoDeviceError:
        return 0


def require_device() -> int:
    """The number of visible GPUs; NoDeviceError, saying what still works without one, when it is 0."""
    if (count := _init()) == 0:
        raise NoDeviceError(f"no NVIDIA GPU is visible (CUDA_VISIBLE_DEVICES?): tensors and forward need one; "
                            f"{_NO_GPU_HINT}", "CUDA_ERROR_NO_DEVICE")
    return count


@dataclass(frozen=True)
class Device:
    """One GPU: its ordinal, primary context and the facts kernels are specialised on."""
    ordinal: int
    handle: object
    context: object
    name: str
    major: int
    minor: int
    sm_count: int
    total_memory: int
    max_shared_per_block: int
    max_shared_per_sm: int
    registers_per_sm: int
    max_threads_per_sm: int
    l2_bytes: int

    @property
    def arch(self) -> str:
        """'sm_90' for an H100: the target the pipeline compiles for."""
        return f"sm_{self.major}{self.minor}"

    def attribute(self, name: str) -> int:
        """A CU_DEVICE_ATTRIBUTE_* value by name; 0 where the driver does not report it."""
        drv = api()
        err, value = drv.cuDeviceGetAttribute(getattr(drv.CUdevice_attribute, name), self.handle)
        return int(value) if int(err) == 0 else 0

    def make_current(self) -> None:
        """Make this device's primary context current on the calling thread (cheap when it already is)."""
        if _tls.ordinal != self.ordinal:
            check(api().cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
            _tls.ordinal = self.ordinal


@functools.cache
def _device(ordinal: int) -> Device:
    count = require_device()
    if not 0 <= ordinal < count:
        raise ValueError(f"device {ordinal} does not exist: this machine has {count} GPU(s), ordinals 0..{count - 1}")
    drv = api()
    with _lock:
        handle = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        ctx = check(drv.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
    attr = drv.CUdevice_attribute

    def get(a):
        return check(drv.cuDeviceGetAttribute(a, handle), "cuDeviceGetAttribute")

    name = check(drv.cuDeviceGetName(256, handle), "cuDeviceGetName").split(b"\x00")[0].decode()
    return Device(
        ordinal=ordinal, handle=handle, context=ctx, name=name,
        major=get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        minor=get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        sm_count=get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        total_memory=check(drv.cuDeviceTotalMem(handle), "cuDeviceTotalMem"),
        max_shared_per_block=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        max_shared_per_sm=get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        registers_per_sm=get(attr.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
        max_threads_per_sm=get(attr.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
        l2_bytes=get(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    )


def get_device(ordinal: int | None = None) -> Device:
    """The device with this ordinal (default: the current one), its context current on this thread."""
    dev = _device(current_ordinal() if ordinal is None else ordinal)
    dev.make_current()
    return dev


def thread_ordinal() -> int | None:
    """The device whose context cuopjit made current on this thread, or None."""
    return _tls.ordinal


def current_ordinal() -> int:
    """The device this thread's tensors and launches use (set_device), 0 until set."""
    return _tls.current


def set_device(ordinal: int) -> None:
    """Make `ordinal` the device this thread's later tensors and launches use."""
    _device(ordinal).make_current()
    _tls.current = ordinal


def synchronize() -> None:
    """Wait for all work cuopjit queued on the current device."""
    get_device()
    check(api().cuCtxSynchronize(), "cuCtxSynchronize")


def memory_info() -> tuple[int, int]:
    """(free, total) bytes on the current device."""
    get_device()
    return check(api().cuMemGetInfo(), "cuMemGetInfo")


@functools.cache
def driver_version() -> str:
    v = check(api().cuDriverGetVersion(), "cuDriverGetVersion")
    return f"{v // 1000}.{(v % 1000) // 10}"


@functools.cache
def raw_entry(name: str) -> "ctypes._CFuncPtr | None":
    """A libcuda entry point for ctypes, or None where the library cannot be opened.

    The hot path (launch, event record) uses these with arguments prebuilt as ctypes objects:
    cuda.bindings' Python wrappers convert every handle argument on each call, and ctypes with
    `argtypes` converts too (2.2 us for a launch's 11 arguments); prebuilt objects cost ~0.8 us.
    """
    try:
        lib = ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")
        fn = getattr(lib, name)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    return fn


def handle_value(handle) -> ctypes.c_void_p:
    """The address inside a cuda.bindings handle (CUfunction, CUevent, ...), as a ctypes argument."""
    return ctypes.c_void_p(int(handle))


class Function:
    """A loaded kernel: module + CUfunction, plus its dynamic shared memory limit raised as needed."""

    def __init__(self, cubin: bytes, kernel: str, device: Device):
        drv = api()
        device.make_current()
        self.module = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
        self.handle = check(drv.cuModuleGetFunction(self.module, kernel.encode()), f"cuModuleGetFunction({kernel})")
        self.device = device
        err, static = drv.cuFuncGetAttribute(drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                                             self.handle)
        self._static_shared = int(static) if int(err) == 0 else 0
        self._shared_limit = 48 * 1024 - self._static_shared   # dynamic bytes allowed without an opt-in
        self._carveout = False

    def __del__(self) -> None:
        """The module is unloaded once nothing (cache entry, plan) holds this function any more."""
        module = getattr(self, "module", None)
        if module is not None:
            try:
                api().cuModuleUnload(module)
            except Exception:  # interpreter shutdown
                pass

    def prefer_shared_carveout(self) -> None:
        """Ask for the largest shared-memory carveout, so several blocks with large shared buffers fit per SM
        (the driver's default may pick a smaller one)."""
        if not self._carveout:
            drv = api()
            check(drv.cuFuncSetAttribute(
                self.handle, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 100),
                "cuFuncSetAttribute")
            self._carveout = True

    def attributes(self, threads: int, shared: int) -> dict:
        """cuFuncGetAttribute figures and the driver's resident blocks per SM for `threads` and `shared` bytes."""
        drv = api()
        a = drv.CUfunction_attribute

        def get(name: str) -> int:
            err, value = drv.cuFuncGetAttribute(getattr(a, name), self.handle)
            return int(value) if int(err) == 0 else 0
        err, blocks = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.handle, threads, shared)
        return {"registers": get("CU_FUNC_ATTRIBUTE_NUM_REGS"),
                "static_shared": get("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
                "local_bytes": get("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
                "blocks": int(blocks) if int(err) == 0 else None}

    def reserve_shared(self, nbytes: int) -> None:
        """Allow `nbytes` of dynamic shared memory: past 48 KiB with the kernel's static shared memory, an
        explicit opt-in, up to the device's per-block limit for both together."""
        if nbytes > self._shared_limit:
            total = nbytes + self._static_shared
            if total > self.device.max_shared_per_block:
                raise ValueError(f"kernel needs {total} bytes of shared memory; {self.device.name} allows "
                                 f"{self.device.max_shared_per_block}: choose a smaller tile_size")
            drv = api()
            check(drv.cuFuncSetAttribute(
                self.handle, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
                "cuFuncSetAttribute")
            self._shared_limit = nbytes


def raise_status(err: int, what: str) -> None:
    """Raise ExecutionError for a raw CUresult (from a ctypes call into libcuda); no-op for 0."""
    if err:
        check((api().CUresult(err),), what)


def load_function(cubin: bytes, kernel: str, device: Device) -> Function:
    """Load a cubin and look up its entry point; a rejected image raises ExecutionError (name in .error_name)."""
    return Function(cubin, kernel, device)


REJECTED_IMAGE_ERRORS = frozenset({
    "CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_SOURCE",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_INVALID_PTX", "CUDA_ERROR_NOT_FOUND",
    "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"})


def is_rejected_image(exc: ExecutionError) -> bool:
    """True when the driver refused the cubin itself (so the cache entry should be dropped and rebuilt)."""
    return exc.error_name in REJECTED_IMAGE_ERRORS


def current_device() -> int:
    """The ordinal of the current device (cuOP's `get_device()`); NoDeviceError, saying what works without one,
    when there is no GPU."""
    require_device()
    return current_ordinal()

