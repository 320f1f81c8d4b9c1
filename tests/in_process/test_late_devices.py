"""Issue 59, item 2: a device late but alive before a collective (a host callback that
fetches data, a debugger's prompt) is waited for up to JAX_ACCL_TIMEOUT_S, not taken for
XLA:CPU's stall (xla_ffi/runtime/stall.h), with XLA:CPU's pool as jax_accl sizes it (two
threads per device: there a launch's devices always have a thread). Scaled down from the
issue's 15 s against the default JAX_ACCL_STALL_S=10: 7 s against 2 s (the idleness is
measured over 5 s whatever JAX_ACCL_STALL_S says, so before the fix the call failed at
about 5 s). tests/multiprocess/test_late_devices_across_processes.py: the same across
processes, and a process stopped and continued."""

import time

import jax
import numpy as np
import pytest
from accl_testing import put
from jax.experimental import io_callback
from jax.sharding import PartitionSpec as P

import jax_accl
from jax_accl import _accl, config

LATE_S = 7.0


def late_on_device_3(shard):
    """The host callback: returns its shard, after LATE_S seconds on device 3 (its shard's
    values are 3) as a data fetch or a checkpoint write would."""
    if shard[0, 0] == 3:
        time.sleep(LATE_S)
    return shard


@pytest.fixture
def stall_after_2_s():
    _accl.set_stall_seconds(2)
    yield
    _accl.set_stall_seconds(config.value("JAX_ACCL_STALL_S"))


def test_a_device_late_in_a_host_callback_is_waited_for(mesh8, stall_after_2_s):
    x = put(mesh8, np.repeat(np.arange(8, dtype=np.float32)[:, None], 4, axis=1), P("i"))

    def body(a):
        fetched = io_callback(late_on_device_3, jax.ShapeDtypeStruct(a.shape, a.dtype), a)
        return jax_accl.psum(fetched, "i")

    step = jax.jit(
        jax.shard_map(body, mesh=mesh8, in_specs=P("i"), out_specs=P("i"), check_vma=False)
    )
    step = step.lower(x).compile()  # the compile is not part of the wait
    start = time.monotonic()
    y = np.asarray(jax.block_until_ready(step(x)))
    assert time.monotonic() - start >= LATE_S  # the other devices waited for device 3
    np.testing.assert_array_equal(y, np.full((8, 4), 28.0, np.float32))  # 0 + 1 + ... + 7
