"""What carries a compiled program's collectives: ``jax_accl.collectives(fn, *args)``.

    >>> jax_accl.collectives(step, params, opt_state, x, y)
    {'xla': {'all-reduce': {'ops': 1, 'buffers': 9}}, 'jax_accl': {},
     'xla_collectives_on': 'jax_accl', 'not_routed': {'psum_invariant': 1}}

``xla``: XLA's own collectives in the compiled HLO by kind (an async start counted
once; ``buffers``, their operands); ``jax_accl``: jax_accl's custom calls by target;
``xla_collectives_on``: what runs XLA's collectives across processes in this process
(``jax_accl`` with JAX_ACCL_XLA_COLLECTIVES=1, else JAX's setting, e.g. ``gloo``);
``not_routed``: JAX's collective primitives in the traced program by name (binds), which
stayed XLA's: routing was off there, or routing does not carry them (jax 0.12's
``pmax_scatter``, ``pmin_scatter``, ``pxor``).
A step whose ``xla`` entry is empty, or whose XLA collectives run on jax_accl, has
every collective on jax_accl."""

from __future__ import annotations

from jax_accl.hlo_text import accl_calls_in, xla_collectives_in


def compiled_collectives(hlo_text: str) -> dict:
    """``collectives``' report of a compiled module's text."""
    xla, ours = xla_collectives_in(hlo_text), accl_calls_in(hlo_text)
    return {"xla": xla, "jax_accl": ours, "xla_collectives_on": xla_collectives_on()}


def xla_collectives_on() -> str:
    from jax_accl import _compat, xla_collectives

    implementation = _compat.cpu_collectives_implementation()
    if implementation == "mpi" and xla_collectives.enabled():
        return "jax_accl"
    return implementation or "none"


def collectives(fn, *args, **kwargs) -> dict:
    """Compiles `fn` (a jitted function, or any function, which is jitted) for `args`
    and reports its collectives (see the module's docstring). Where XLA cannot compile
    it, the error notes the JAX collectives left to XLA."""
    import jax

    from jax_accl import _compat

    jitted = fn if hasattr(fn, "trace") else jax.jit(fn)
    traced = jitted.trace(*args, **kwargs)
    not_routed = _compat.primitive_counts(traced.jaxpr.jaxpr, _compat.jax_collective_names())
    try:
        text = traced.lower().compile().as_text()
    except Exception as e:
        if not_routed:
            e.add_note(f"jax_accl.collectives: JAX collectives left to XLA: {not_routed}")
        raise
    return {**compiled_collectives(text), "not_routed": not_routed}
