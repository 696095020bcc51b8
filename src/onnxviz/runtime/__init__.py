"""onnxviz.runtime: the bundled interpreter (docs/architecture.md §5).

Modules, one job each:

* ``session``      `Session`: run, steps(), step/step_over/step_out, run_to, breakpoints,
                   cancel, value inspection; node addresses ``<graph path>::<label>``
* ``plan``         a graph compiled once: order, kernel per node, decoded attributes,
                   integer slots, last uses, constant folding marks
* ``frames``       `Frame` and `Executor`: runs a plan as a generator of events
* ``control_flow`` If, Loop, Scan (opset 8 and 9+), SequenceMap in nested frames
* ``functions``    model-local functions and schema function bodies (incl.
                   context-dependent ones) expanded when no kernel is registered
* ``inplace``      elementwise ops computed into a dead, unshared input (unwatched runs)
* ``events``       what steps() yields (NodeStarted/Finished/Failed, FrameEntered/Left, ...)
* ``values``       value helpers: describe, nbytes, NaN/Inf check, protobuf -> value,
                   wider compute types for ml_dtypes
* ``memory``       intermediate values kept under a memory cap, drops recorded
* ``registry``, ``attributes``, ``invoke``  the kernel contract (see registry's docstring)
* ``kernels/``     kernel families, one module each, imported automatically
* ``unsupported``  ops knowingly not run, with reasons (checked by the coverage test)
* ``conformance``  ONNX backend node cases and light models through the Session
"""
