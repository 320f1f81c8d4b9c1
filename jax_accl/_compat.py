"""Every private JAX API jax_accl uses, in one place (they move between versions).

tests/jax/test_compat.py checks that each of them is still there.
"""
from jax._src import config as _config
from jax._src import core
from jax._src import dispatch
from jax._src import distributed as _distributed
from jax._src import mesh as _mesh_lib
from jax._src.interpreters import ad, batching, mlir, pxla
from jax._src.lax import lax as _lax_internal
from jax._src.mesh import get_abstract_mesh as _get_abstract_mesh
from jax._src.lax import parallel as _parallel
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo

__all__ = ["ad", "batching", "core", "dispatch", "hlo", "ir", "mlir", "pxla"]


def check_vma_enabled() -> bool:
    """True inside shard_map(check_vma=True) tracing (jax.lax.psum then binds psum_invariant)."""
    return bool(_config._check_vma.value)


def auto_pcast_enabled() -> bool:
    return bool(_config.auto_pcast.value)


def varying_axes(aval) -> frozenset:
    """The mesh axes along which a value varies (its varying-manual-axes type)."""
    return aval.mat.varying


def with_varying_axes(aval, varying: frozenset):
    return aval.update(manual_axis_type=aval.mat.update(varying=varying))


def pvary(x, axes: tuple):
    return core.pvary(x, axis_name=axes)


# Argument handling shared with jax.lax.psum, so that both accept and reject alike.
skip_size_one_axes = _parallel._maybe_skip_one_sized_axes
validate_axis_index_groups = _parallel._validate_reduce_axis_index_groups
canonicalize_axis_index_groups = _parallel._canonicalize_axis_index_groups
value_state_along = _parallel._get_from  # 'varying' | 'invarying' | 'unreduced' | 'reduced'
insert_collective_pvary = _parallel.insert_collective_pvary
replica_groups = _parallel._replica_groups  # (axis_context, axes, axis_index_groups)
check_axis_names = _parallel._check_axis_names
linear_jvp = ad.linear_jvp


def ct_aval(aval):
    """The cotangent type of a primal aval (named to_ct_aval since jax 0.10)."""
    to_ct = getattr(aval, "to_ct_aval", None) or aval.to_tangent_aval
    return to_ct()
const_like = _lax_internal._const  # (like, python_scalar) -> constant of like's dtype, as psum uses


def mesh_axis_names() -> tuple:
    """Axis names of the mesh being traced (shard_map); vmapped axis names are not here."""
    return tuple(_get_abstract_mesh().axis_names)


def module_scratch(ctx) -> dict:
    """A dict that lives as long as the MLIR module being lowered."""
    return ctx.module_context.cached_primitive_lowerings


def device_assignment(ctx) -> tuple:
    """The devices of a module being lowered, indexed by partition id."""
    axis_context = ctx.module_context.axis_context
    mesh = getattr(axis_context, "mesh", None)
    devices = getattr(mesh, "devices", None)
    if devices is not None and not isinstance(mesh, _mesh_lib.AbstractMesh):
        return tuple(devices.flat)
    assignment = getattr(axis_context, "device_assignment", None)
    if assignment is not None:
        return tuple(assignment)
    raise NotImplementedError(
        "jax_accl: cannot tell which device runs each partition of this multi-process "
        f"program (axis context {type(axis_context).__name__}); use jax.shard_map over a Mesh")


def distributed_client():
    """The client of jax.distributed's coordination service, or None before initialize()."""
    return _distributed.global_state.client


def use_gloo_on_interface(interface: str) -> None:
    """Make JAX's CPU backend use gloo collectives bound to `interface` (jax picks the
    hostname's address otherwise, which network namespaces share). Call after
    jax.distributed.initialize() and before the first computation."""
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    def factory():
        collectives = _jax.make_gloo_tcp_collectives(
            distributed_client=_distributed.global_state.client, interface=interface)
        return xla_bridge.make_cpu_client(collectives=collectives)

    xla_bridge.register_backend_factory("cpu", factory, priority=0, fail_quietly=False)
