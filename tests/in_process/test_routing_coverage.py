"""What routing carries and what it leaves to XLA, on each jax the package supports
(issue 59): a JAX collective routing does not carry (jax 0.12's private pmax_scatter,
pmin_scatter and pxor) runs as XLA's, exactly as without routing, and
jax_accl.collectives names it; a routed psum_invariant refuses what jax's refuses (jax
0.12 refuses every axis the value does not vary along), never computing it instead."""

import jax
import numpy as np
import pytest
from accl_testing import P, put
from jax._src.lax import parallel

import jax_accl


def outcome(fn, *args):
    """("value", its bytes) or ("error", its type, its first line)."""
    try:
        return ("value", np.asarray(fn(*args)).tobytes())
    except Exception as e:  # any error: compared with jax's
        return ("error", type(e).__name__, str(e).splitlines()[0])


def both(body, mesh, in_spec, out_spec):
    """The body in a plain jax.shard_map and in jax_accl.shard_map (routed), jitted."""
    return [
        jax.jit(sm(body, mesh=mesh, in_specs=in_spec, out_specs=out_spec))
        for sm in (jax.shard_map, jax_accl.shard_map)
    ]


# A direct bind of JAX's psum_invariant (as JAX's own rules make) of a value that varies
# along "x" only, over: an axis it varies on; one it does not (refused by every jax); both
# (jax 0.10 sums, jax 0.12 refuses).
@pytest.mark.parametrize("axes", [("x",), ("y",), ("x", "y")])
def test_a_routed_psum_invariant_refuses_what_jaxs_refuses(axes):
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    x = np.arange(2 * 4 * 3, dtype=np.int32).reshape(2, 4, 3) * 37 - 400
    out = P() if "x" in axes else P("x")
    plain, routed = both(lambda v: parallel.psum_invariant_p.bind(v, axes=axes), mesh, P("x"), out)
    arg = put(mesh, x, P("x"))
    want = outcome(plain, arg)
    assert outcome(routed, arg) == want
    if want[0] == "value":
        assert "accl_allreduce" in jax_accl.collectives(routed, arg)["jax_accl"]


def cases_left_to_xla():
    """(name, body, out_spec, reference of the (8, 16) input) of the JAX collectives
    routing leaves to XLA in this jax."""
    cases = []
    for name, fold in (("pmax_scatter", np.max), ("pmin_scatter", np.min)):
        if hasattr(parallel, name):  # jax >= 0.12
            scatter = getattr(parallel, name)

            def body(v, scatter=scatter):
                return scatter(v[0], "i", scatter_dimension=0, tiled=True)[None]

            cases.append((name, body, P("i"), lambda x, fold=fold: fold(x, 0).reshape(8, 2)))
    return cases


def test_collectives_routing_leaves_to_xla_run_as_xlas_and_are_named(mesh8):
    x = (np.arange(8 * 16, dtype=np.int32).reshape(8, 16) * 7919) % 1000 - 500
    arg = put(mesh8, x, P("i"))
    # On every jax: jax.lax.psum in a plain shard_map is XLA's, routed it is jax_accl's.
    plain, routed = both(lambda v: jax.lax.psum(v, "i"), mesh8, P("i"), P())
    assert jax_accl.collectives(plain, arg)["not_routed"] == {"psum_invariant": 1}
    assert jax_accl.collectives(routed, arg)["not_routed"] == {}
    cases = cases_left_to_xla()
    assert bool(cases) == (jax.__version_info__ >= (0, 12))  # they came with jax 0.12
    for name, body, out_spec, reference in cases:
        plain, routed = both(body, mesh8, P("i"), out_spec)
        got = np.asarray(routed(arg))
        assert got.tobytes() == np.asarray(plain(arg)).tobytes() == reference(x).tobytes(), name
        report = jax_accl.collectives(routed, arg)
        assert report["not_routed"] == {name: 1}, name
        assert report["jax_accl"] == {} and report["xla"]["reduce-scatter"]["ops"] == 1, name


def test_pxor_stays_xlas_and_the_report_names_it_where_xla_cannot_compile_it(mesh8):
    """jax 0.12's pxor (an XOR all-reduce, which jax_accl does not carry): XLA:CPU cannot
    compile it, routed or not; jax_accl.collectives' error names the JAX collective it
    left to XLA."""
    if not hasattr(parallel, "pxor_p"):
        assert jax.__version_info__ < (0, 12)  # pxor came with jax 0.12 (CI runs both)
        return
    arg = put(mesh8, np.arange(8 * 4, dtype=np.int32).reshape(8, 4), P("i"))
    plain, routed = both(lambda v: parallel._pxor(v, "i"), mesh8, P("i"), P())
    failed = outcome(routed, arg)
    assert failed[0] == "error" and failed == outcome(plain, arg)
    with pytest.raises(Exception) as raised:
        jax_accl.collectives(routed, arg)
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "{'pxor': 1}" in notes, notes
