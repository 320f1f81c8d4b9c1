"""Native tier: the ptrace permission that cross-memory attach needs (PR_SET_PTRACER_ANY
under Yama) is held by every call that probes or copies by it, and revoked only by the
last holder. Two lanes of this process, every rank a thread, every access checked as
Yama would check it (xla_ffi/testing/cma_lanes.h)."""

from jax_accl import _accl, _accl_testing


def test_a_lane_that_ends_never_revokes_the_permission_another_lane_probes_by():
    """Lane A's probe fails (a peer in another pid namespace); lane B's ranks are inside
    their call, waiting to probe, while lane A runs and ends. Lane B still probes, copies
    its 1 MiB per rank by cross-memory attach and is exact; the permission goes once both
    ended (and went after lane A alone)."""
    assert not _accl.cross_memory_attach_allowed()
    r = _accl_testing.cma_lanes(ranks=3, count=1 << 18, timeout_s=30.0)
    assert r["errors"] == [], r
    assert not r["allowed_before"] and not r["lane_a_usable"], r
    assert not r["allowed_after_lone_lane"], r  # the last holder revokes
    assert r["allowed_while_b_waits"], r  # lane A ended, lane B still holds it
    assert r["lane_b_usable"] and r["lane_b_exact"] and r["refused"] == 0, r
    # Each rank read its block of the two others' inputs and wrote it to their outputs.
    assert r["lane_b_bytes"] == 2 * 2 * (1 << 18) * 4, r
    assert not r["allowed_after"] and not _accl.cross_memory_attach_allowed(), r
