"""The MPI call an XLA collective of a compiled program makes first, as jax_accl's MPI
library sees it (xla_ffi/mpiabi/calls.cc): what a provisional communicator's first call is
matched against (xla_split_places.py judges whether two groups' calls can be told apart,
xla_subsets.py tells them to the library). A leaf: both import it."""

from __future__ import annotations

from jax_accl.hlo_text import KINDS

# The MPI call each kind makes first (xla_ffi/mpiabi/calls.cc) and the element types
# XLA:CPU's MPI layer passes as the MPI datatype of jax_accl's DType (common/dtype.h's
# order); another type's calls are told apart by kind alone.
_KIND_CODES = {kind: i for i, kind in enumerate(KINDS)}
_DTYPE_CODES = {
    "pred": 5, "s8": 1, "s16": 2, "s32": 3, "s64": 4, "u8": 5, "u16": 6, "u32": 7,
    "u64": 8, "f32": 11, "f64": 12, "c64": 13, "c128": 14,
}  # fmt: skip


def signature(kind: str, dtype: str, count: int) -> tuple[int, int, int]:
    """What the library compares a first call on a provisional communicator with: (kind,
    dtype code or -1, elements per rank or -1). Only an all-reduce's, all-gather's or
    reduce-scatter's call says its element type and count as the HLO does; an
    all-to-all's or permute's (point-to-point steps of bytes) says its kind alone."""
    if kind in ("all-to-all", "collective-permute") or dtype not in _DTYPE_CODES or count < 0:
        return (_KIND_CODES[kind], -1, -1)
    return (_KIND_CODES[kind], _DTYPE_CODES[dtype], count)
