"""Code generation and compilation: Jinja rendering with #line, NVRTC, the compile/cache/load pipeline,
ptxas logs and disassembly. Works without a GPU except where a kernel is loaded."""
