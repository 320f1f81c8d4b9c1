"""jax_accl.recover() on a real two-process job (jax.distributed on localhost), one job
for the whole file: its verdicts are the same on every process, and a process that calls
it once more than its peer hangs nobody.

Each process first makes exact jax_accl all-reduces and one recover() together. Then it
reports synthetic op positions (jax_accl's lane_positions and align_lane replaced in the
worker) through the real store: process 1 failed call 4 of an op that process 0 finished
(its next call 6, no failure), which both must refuse with the same words; positions that
agree (process 0 short of the failed call), which move process 0's op; and different
steps to resume from, which both must refuse. Then process 0 calls recover() once more
(deadline 2 s) while process 1 sleeps 8 s: it fails by its deadline naming process 1, and
the next recover() of both pairs up at once (before, process 1 took process 0's extra
report as its own call's and process 0 waited for a generation nobody wrote, to its
deadline); all-reduces after it are exact.

This file is also the job's worker (run by path), like test_checkpoint_retry.py."""

import json
import sys
import time
from pathlib import Path

import pytest

LANE = 0x5EED  # a synthetic op, in no real program
EXTRA_DEADLINE_S, PEER_LATE_S = 2.0, 8.0  # a 6 s margin on a busy 2-core machine


@pytest.fixture(scope="module")
def results():
    from jax_accl.testing import launch

    return launch.run_job(
        [str(Path(__file__).resolve())],
        2,
        2,
        env=[{"JAX_ACCL_TIMEOUT_S": "20"}] * 2,
        timeout=240,
    )


def test_a_call_finished_where_another_process_failed_it_raises_on_every_process(results):
    errors = [r["finished_vs_failed"] for r in results]
    assert errors[0] is not None and errors[0] == errors[1], errors  # the same verdict
    assert "process 1 failed call 4 of the op, process 0 finished it" in errors[0], errors
    assert "restart the job" in errors[0], errors
    # Positions that agree: process 0, short of the failed call, moves to it.
    agreed = [r["agreeing"] for r in results]
    assert agreed[0] == {"result": {"lanes": 1, "moved": 1}, "aligned": [[LANE, 5, 4]]}, agreed
    assert agreed[1] == {"result": {"lanes": 1, "moved": 0}, "aligned": []}, agreed


def test_processes_resuming_from_different_steps_raise_on_every_process(results):
    errors = [r["different_steps"] for r in results]
    assert errors[0] is not None and errors[0] == errors[1], errors
    assert "process 0 from step 3, process 1 from step 6" in errors[0], errors
    assert all(r["same_steps"] == {"lanes": 1, "moved": 0} for r in results), results


def test_a_repeated_recover_on_one_process_does_not_hang_its_peers(results):
    extra, peer = results
    assert "process 1 did not call it within 2 s" in extra["extra_call"]["error"], extra
    assert extra["extra_call"]["seconds"] < EXTRA_DEADLINE_S + 3, extra
    # The next call of each pairs up as soon as both came (process 1, 4 s late).
    assert peer["next_call"]["seconds"] < 5, peer
    assert extra["next_call"]["seconds"] < PEER_LATE_S + 5, extra
    for r in results:
        assert r["next_call"]["error"] is None, r
        assert r["exact_after"] == 3, r


def worker(argv):
    import jax

    import jax_accl
    from jax_accl import _accl
    from jax_accl.errors import AcclError
    from jax_accl.testing import worker as w

    w.join([*argv, "--scenario", "recover_agreement", "--reference", "numpy"])
    me = jax.process_index()
    client = jax_accl._compat.distributed_client()
    exact, _, _ = w.checked_psum(1000, seed=3)
    exact("before")
    jax_accl.recover()
    exact("after the first recover()")

    def attempt(**kw):
        try:
            return jax_accl.recover(timeout_s=30, **kw), None
        except AcclError as e:
            return None, str(e)

    real = _accl.lane_positions, _accl.align_lane
    aligned = []
    _accl.align_lane = lambda lane, nxt, failed: aligned.append([lane, nxt, failed])

    def report(nxt, failed):
        _accl.lane_positions = lambda: [(LANE, [0, 1], 0, nxt, failed)]

    result = {}
    report(*[(6, -1), (5, 4)][me])
    result["finished_vs_failed"] = attempt()[1]
    report(*[(4, -1), (5, 4)][me])
    result["agreeing"] = {"result": attempt()[0], "aligned": aligned}
    report(5, 4)  # agreed: the steps alone differ
    result["different_steps"] = attempt(resume_from=[3, 6][me])[1]
    result["same_steps"] = attempt(resume_from=7)[0]
    _accl.lane_positions, _accl.align_lane = real
    # Both have left the calls above before process 0 calls once more.
    client.wait_at_barrier("recover_agreement_extra", 60_000)
    if me == 0:
        began = time.monotonic()
        try:
            jax_accl.recover(timeout_s=EXTRA_DEADLINE_S)
            error = None
        except AcclError as e:
            error = str(e)
        result["extra_call"] = {"error": error, "seconds": time.monotonic() - began}
    else:
        time.sleep(PEER_LATE_S)
    began = time.monotonic()
    _, error = attempt()
    result["next_call"] = {"error": error, "seconds": time.monotonic() - began}
    for k in range(3):
        exact(f"call {k} after the repeated recover()")
    result["exact_after"] = 3
    jax.distributed.shutdown()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    worker(sys.argv[1:])
