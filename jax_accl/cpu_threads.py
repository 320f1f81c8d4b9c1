"""XLA:CPU's thread pool, sized so that a loop with many launches in flight cannot stall
(issue 47).

jaxlib's CPU client runs every device's part of a launch, and the dispatch of the next
launches, on one pool of max(cores, devices) threads, and a dispatch blocks its thread
while its device already has 32 launches in flight. A loop that dispatches steps without
reading a result (the loss read every 50 steps) reaches that bound; the blocked dispatch
threads then leave fewer threads than devices for the launch they wait on, whose first
devices wait in its first collective for the others forever (jax.lax's as well:
XLA's "Termination timeout" abort). With two threads per device, a launch's devices
always have threads beside the blocked dispatches of the next one.

So, when jax_accl is imported before JAX makes its CPU client and neither PJRT_NPROC nor
NPROC (XLA's own setting of the pool's size) is set, the client is made with
PJRT_NPROC = max(cores, 2 x its devices), set only while it is made. Measured on 2 cores
with 8 devices, 100 synchronous demo steps (batch 256 per device): 10.2 and 6.9 s with 16
threads, 12.2 and 10.7 s with XLA's 8. Where the client was made first, or with a smaller
PJRT_NPROC, a call that waits on devices XLA never started fails within seconds saying so
(xla_ffi/runtime/stall.h); the runtime is told the pool's size, and with two threads per
device it never takes a late device (a host callback, a debugger's prompt) for stalled."""

from __future__ import annotations

import os
import re

from jax_accl import config


def threads_for(devices: int) -> int:
    """The pool a client of `devices` CPU devices gets: two threads per device, or one
    per core where there are more cores."""
    return max(os.cpu_count() or 1, 2 * max(1, devices))


def _flag_device_count() -> int:
    """--xla_force_host_platform_device_count of XLA_FLAGS (XLA's default device count
    when JAX passes none), else 1."""
    found = re.findall(
        r"--xla_force_host_platform_device_count=(\d+)", config.environment("XLA_FLAGS") or ""
    )
    return int(found[-1]) if found else 1


def _users_pool_size() -> int | None:
    """The pool's size the user set (PJRT_NPROC, else NPROC): None where neither is set,
    0 where it is not a number."""
    value = config.environment("PJRT_NPROC")
    value = config.environment("NPROC") if value is None else value
    if value is None:
        return None
    return int(value) if value.strip().isdigit() else 0


def make_client_with_threads(make, *args, **kwargs):
    """`make(*args, **kwargs)` (jaxlib's make_cpu_client) with PJRT_NPROC set for it
    where nobody set the pool's size; tells the stall detection the pool's size."""
    from jax_accl import _accl

    devices = kwargs.get("num_devices") or _flag_device_count()
    threads = _users_pool_size()
    if threads is not None:
        client = make(*args, **kwargs)
    else:
        threads = threads_for(devices)
        with config.environment_set("PJRT_NPROC", str(threads)):
            client = make(*args, **kwargs)
    _accl.set_xla_pool(threads, devices)
    return client


def install() -> None:
    """Wraps the making of JAX's CPU client (idempotent; no effect on a client made), and
    gives the stall detection its patience (JAX_ACCL_STALL_S)."""
    from jax_accl import _accl, _compat

    _compat.wrap_cpu_client_maker(make_client_with_threads)
    _accl.set_stall_seconds(config.value("JAX_ACCL_STALL_S"))
