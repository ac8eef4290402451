"""CUDA events for timing: an EventPair around a region of a stream, recorded through libcuda directly."""
from __future__ import annotations

import ctypes
import functools

from . import driver
from ..errors import check


class EventPair:
    """Two CUDA events around a region of the stream; `elapsed_ms()` waits for the second."""

    def __init__(self) -> None:
        drv = driver.api()
        driver.get_device()
        flags = drv.CUevent_flags.CU_EVENT_DEFAULT
        self.start = check(drv.cuEventCreate(flags), "cuEventCreate")
        self.end = check(drv.cuEventCreate(flags), "cuEventCreate")
        raw = driver.raw_entry("cuEventRecord")
        if raw is not None:
            self.record_start = functools.partial(_checked, raw, driver.handle_value(self.start))
            self.record_end = functools.partial(_checked, raw, driver.handle_value(self.end))
        else:
            self.record_start = functools.partial(_checked, _bindings_record, self.start)
            self.record_end = functools.partial(_checked, _bindings_record, self.end)

    def __del__(self) -> None:
        try:
            drv = driver.api()
            drv.cuEventDestroy(self.start)
            drv.cuEventDestroy(self.end)
        except Exception:  # interpreter shutdown
            pass

    def elapsed_ms(self) -> float:
        drv = driver.api()
        check(drv.cuEventSynchronize(self.end), "cuEventSynchronize")
        return check(drv.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime")


def _bindings_record(event, stream: ctypes.c_void_p) -> int:
    return int(driver.api().cuEventRecord(event, stream.value or 0)[0])


def _checked(record, event, stream: int = 0) -> None:
    err = record(event, ctypes.c_void_p(stream))
    driver.raise_status(err, "cuEventRecord")
