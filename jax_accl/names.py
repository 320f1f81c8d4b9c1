"""The names of reduction ops and algorithms, with the codes the FFI handler decodes:
read from the native module, whose enums are the one source."""

from __future__ import annotations

from jax_accl import _accl

OP_CODES: dict[str, int] = dict(_accl.OP_CODES)  # sum, prod, min, max
OPS = tuple(OP_CODES)
ALGORITHM_CODES: dict[str, int] = dict(_accl.ALGORITHM_CODES)  # auto, direct, ring, ...
ALGORITHMS = tuple(ALGORITHM_CODES)
# Each FFI target (accl_allreduce, ...) and its `collective` attribute: the native table's
# rows (xla_ffi/runtime/collective.cc), every one registered with XLA.
COLLECTIVE_CODES: dict[str, int] = dict(_accl.collective_codes())
# The jax_accl function each op is called through, for messages and profile names.
API_NAMES = {"sum": "psum", "prod": "allreduce", "min": "pmin", "max": "pmax"}
