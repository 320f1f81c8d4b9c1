"""jax_accl: hierarchical multi-link all-reduce for JAX, as XLA FFI custom calls.

``jax_accl.psum`` is a drop-in replacement for ``jax.lax.psum`` inside
``jax.jit(jax.shard_map(...))`` and ``jax.pmap`` programs.
"""
from jax_accl import _native
from jax_accl import distributed, profiler
from jax_accl.api import allreduce, pmax, pmean, pmin, psum, shard_map
from jax_accl.errors import AcclError
from jax_accl.patch import patch_psum
from jax_accl.routing import routed
from jax_accl.stats import reset_stats, stats

__version__ = "0.1.0"
__all__ = ["AcclError", "allreduce", "distributed", "patch_psum", "pmax", "pmean", "pmin",
           "profiler", "psum", "reset_stats", "routed", "shard_map", "stats"]

_native.register_targets()
from jax_accl import fusion as _fusion, routing as _routing  # noqa: E402
from jax_accl.primitives import lowering as _lowering  # noqa: E402,F401

_fusion.install()
if _routing.active_globally():  # JAX_ACCL_ROUTING=1
    _routing.install()
from jax_accl import calibrate as _calibrate  # noqa: E402

_calibrate.load()  # this machine's cost-model constants, if `bench --calibrate` stored them
