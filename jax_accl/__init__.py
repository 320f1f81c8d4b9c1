"""jax_accl: hierarchical multi-link all-reduce for JAX, as XLA FFI custom calls.

``jax_accl.psum`` is a drop-in replacement for ``jax.lax.psum`` inside
``jax.jit(jax.shard_map(...))`` and ``jax.pmap`` programs.
"""

import sys as _sys
import warnings as _warnings

from jax_accl import config as _config
from jax_accl.errors import AcclWarning as _AcclWarning

# `python -m jax_accl.config` (the knob table): runpy would warn that this package
# imported the module before running it, which is harmless here.
_warnings.filterwarnings(
    "ignore", message="'jax_accl.config' found in sys.modules", category=RuntimeWarning
)
# A misspelt JAX_ACCL_* variable, unless the start-up hook said so already.
if not getattr(_sys.modules.get("_jax_accl_startup"), "warned", False):
    for _line in _config.misspelt():
        _warnings.warn(_line, _AcclWarning, stacklevel=2)

from jax_accl import xla_collectives as _xla_collectives  # noqa: E402

_xla_collectives.prepare()  # before jax's import (JAX_ACCL_XLA_COLLECTIVES=1)

from jax_accl import ffi_targets  # noqa: E402

_xla_collectives.finish()
ffi_targets.register()  # before anything can lower a call; explains a missing _accl

from jax_accl import cpu_threads as _cpu_threads  # noqa: E402

_cpu_threads.install()  # XLA:CPU's pool sized for launches in flight (issue 47)

from jax_accl import distributed, profiler  # noqa: E402
from jax_accl import fusion as _fusion  # noqa: E402
from jax_accl import membership as _membership  # noqa: E402
from jax_accl import routing as _routing  # noqa: E402
from jax_accl.all_to_all import all_to_all, ragged_all_to_all  # noqa: E402
from jax_accl.api import allreduce, pmax, pmean, pmin, psum, shard_map  # noqa: E402
from jax_accl.compiled import collectives  # noqa: E402
from jax_accl.errors import AcclError, AcclWarning  # noqa: E402
from jax_accl.patch import patch_psum  # noqa: E402
from jax_accl.permute import ppermute  # noqa: E402
from jax_accl.primitives import lowering as _lowering  # noqa: E402,F401
from jax_accl.recovery import abort, recover  # noqa: E402
from jax_accl.rooted import broadcast, reduce  # noqa: E402
from jax_accl.routing import routed  # noqa: E402
from jax_accl.scatter_gather import all_gather, psum_scatter  # noqa: E402
from jax_accl.stats import reset_stats, stats  # noqa: E402

_membership.install()  # processes that come back join (jax_enable_recoverability)

__version__ = "0.1.0"
__all__ = [
    "AcclError",
    "AcclWarning",
    "abort",
    "all_gather",
    "all_to_all",
    "allreduce",
    "broadcast",
    "collectives",
    "distributed",
    "patch_psum",
    "pmax",
    "pmean",
    "pmin",
    "ppermute",
    "profiler",
    "psum",
    "psum_scatter",
    "ragged_all_to_all",
    "recover",
    "reduce",
    "reset_stats",
    "routed",
    "shard_map",
    "stats",
]

_fusion.install()
_routing.install_transposes()
if _routing.active_globally():  # JAX_ACCL_ROUTING=1
    _routing.install()
