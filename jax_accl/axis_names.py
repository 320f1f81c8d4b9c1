"""The check that a collective's axis names are bound where it is traced: jax.lax's
NameError (its first line word for word), followed by the names that are bound there."""

from __future__ import annotations

from jax_accl import _compat as c


def check_bound(axes: tuple, api: str) -> None:
    """NameError where a named axis of `axes` (positional ones are ints) is bound by no
    enclosing jax.shard_map, jax.pmap or jax.vmap; `api` names the function called,
    e.g. "psum"."""
    try:
        c.check_axis_names(axes, api)
    except NameError as e:
        bound = list(c.core.get_axis_env().axis_names())
        where = (
            f"the axis names bound here are {', '.join(map(repr, bound))} (jax.shard_map's "
            "mesh axes, jax.pmap's or jax.vmap's axis_name)"
            if bound
            else "no axis name is bound here: call it inside jax.shard_map (a mesh axis), "
            "jax.pmap or jax.vmap (their axis_name)"
        )
        raise NameError(f"{e}\njax_accl.{api}: {where}") from None
