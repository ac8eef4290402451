"""The CUDA driver boundary: the only package that imports cuda.bindings. Devices and contexts,
streams, events, device memory, modules and functions, graphs, the NVRTC binding; every status
goes through `cuopjit.errors.check`."""
