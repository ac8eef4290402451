"""CUDA graphs: `with cuopjit.graph() as g:` captures forwards, `g.replay()` reruns them.

Inside the block forwards run on the graph's capture stream (relaxed capture mode, so a forward
that still has to build or load its kernel may do so: that happens once, at capture). Replays
read and write the same device buffers as the captured calls: change the data in those tensors
between replays, never their shapes, their pointers or the operators' settings (a new shape or
setting needs a new capture). Tensors must be created before the block: an allocation on the
default stream inside it would break the capture, and raises instead.
"""
from __future__ import annotations

from typing import Any

from . import driver, streams
from ..errors import ExecutionError, check

class Graph:
    """A captured sequence of forwards; build it with `cuopjit.graph()`."""

    def __init__(self, device: int | None = None):
        self.stream = streams.Stream(device)
        self._graph = None
        self._exec = None
        self._previous = 0
        self._was_capturing = False

    def __enter__(self) -> "Graph":
        if self._exec is not None:
            raise RuntimeError("this graph is already captured: make a new cuopjit.graph() to capture again")
        drv = driver.api()
        driver.get_device(self.stream.device)
        check(drv.cuStreamBeginCapture(self.stream.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
              "cuStreamBeginCapture")
        self._previous = streams.current()
        streams.local.stream = self.stream.handle
        self._was_capturing = streams.set_relaxed_capture(True)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        drv = driver.api()
        streams.set_relaxed_capture(self._was_capturing)
        streams.local.stream = self._previous
        err, graph = drv.cuStreamEndCapture(self.stream.handle)
        if exc_type is not None:
            if int(err) == 0:
                drv.cuGraphDestroy(graph)
            return
        if int(err) != 0:
            raise ExecutionError(f"the graph capture failed ({err.name}): something in the block used the default "
                                 "stream or synchronised the device (create tensors and read results outside "
                                 "the block)", err.name)
        self._graph = graph
        self._exec = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")

    def replay(self, stream: Any = None) -> None:
        """Run the captured forwards again on `stream` (default: the current stream), on the buffers' new data."""
        if self._exec is None:
            raise RuntimeError("nothing captured yet: use `with cuopjit.graph() as g:` around forwards first")
        check(driver.api().cuGraphLaunch(self._exec, streams.handle(stream)), "cuGraphLaunch")

    def __del__(self) -> None:
        try:
            drv = driver.api()
            if self._exec is not None:
                drv.cuGraphExecDestroy(self._exec)
            if self._graph is not None:
                drv.cuGraphDestroy(self._graph)
        except Exception:  # interpreter shutdown
            pass


def graph(device: int | None = None) -> Graph:
    """A new graph to capture into: `with cuopjit.graph() as g: ...; g.replay()`."""
    return Graph(device)
