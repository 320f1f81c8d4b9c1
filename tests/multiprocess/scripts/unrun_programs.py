"""Programs loaded that never run, 4 CPU devices per process, never naming jax_accl but to
count its calls. Each part uses groups of its own (XLA keeps a communicator per group):
a global psum over every device of the job in some order, whose group starts with one
of process 0's devices, and a local psum over process 0's devices in the same order,
whose group starts with that device too: each local device's split (color, key) fits
both groups (on process 1 the local group starts with its own device: no such split).

guard (as jax's tests/multiprocess/thread_guard_test.py): the global psum called from a
thread while jax.thread_guard(True) is set in this one, refused by JAX before it runs
(its error kept); then the local psum, whose splits that program's group no longer
makes ambiguous; then the global psum again from this thread, which runs.

freed: the global psum compiled ahead of time and dropped unrun (its executable
collected: a weak reference says so); then the local psum.

kept: the same with the compiled global psum kept alive (still loaded, never run): the
local psum's splits on process 0 are refused, as which of the two programs runs cannot
be told (an error, never a sum over the wrong group), while process 1's local psum runs.

again: a global psum refused by the thread guard, then another global psum compiled and
kept unrun whose group puts another of process 0's devices at one of its places
(admitted: the refused one holds none); the refused one run again is refused then, in
every process, as that place's device cannot be told.

Prints ``RESULT <json>``: each program's shards or its error, the MPI calls of each
part, and whether the dropped executable was collected."""

import concurrent.futures
import gc
import json
import weakref

import jax
import job_start  # scripts/job_start.py, beside this one
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

args = job_start.join(devices=4)


calls = job_start.xla_calls


def psum_over(order):
    """A jitted psum over the devices `order` (global ids) and its input (1, 2, ...)."""
    devices = {d.id: d for d in jax.devices()}
    mesh = jax.sharding.Mesh(np.array([devices[i] for i in order]), ("i",))
    spec = P("i")
    f = jax.jit(
        jax.shard_map(lambda v: jax.lax.psum(v, "i"), mesh=mesh, in_specs=spec, out_specs=spec)
    )
    data = np.arange(1, len(order) + 1, dtype=np.int32)
    x = jax.make_array_from_callback(data.shape, NamedSharding(mesh, spec), lambda i: data[i])
    return f, x


def run_psum(order):
    f, x = psum_over(order)
    return f(x)


def shards(y):
    return [np.asarray(s.data).tolist() for s in y.addressable_shards]


def attempt(run):
    try:
        return shards(jax.block_until_ready(run()))
    except Exception as e:  # JAX's thread guard, or jax_accl's refused split
        return f"{type(e).__name__}: {e}"


def orders(first_local):
    """A global order and process 0's and this process's local orders, each starting with
    process 0's device `first_local` (process 1's local order with its own)."""
    per = [sorted(d.id for d in jax.devices() if d.process_index == p) for p in range(2)]
    rotate = [per[0][first_local:] + per[0][:first_local], per[1]]
    rotate[1] = rotate[1][first_local:] + rotate[1][:first_local]
    return rotate[0] + rotate[1], rotate[jax.process_index()]


result: dict = {"process_id": jax.process_index()}

# guard
everyone, mine = orders(0)
f_global, x_global = psum_over(everyone)
before = calls()
with jax.thread_guard(True), concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    refused = pool.submit(f_global, x_global)
result["guard_global"] = attempt(refused.result)
result["guard_local"] = attempt(lambda: run_psum(mine))
result["guard_global_again"] = attempt(lambda: f_global(x_global))
after = calls()
result["guard_calls"] = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k)}

# freed
everyone, mine = orders(1)
f_global, x_global = psum_over(everyone)
compiled = f_global.lower(x_global).compile()
gone = weakref.ref(compiled._executable)
del compiled, f_global
jax.clear_caches()  # the jit and lowering caches hold a compiled program too
gc.collect()
result["freed_collected"] = gone() is None
result["freed_local"] = attempt(lambda: run_psum(mine))

# kept
everyone, mine = orders(2)
f_global, x_global = psum_over(everyone)
kept = f_global.lower(x_global).compile()
result["kept_local"] = attempt(lambda: run_psum(mine))

# again
everyone, _ = orders(3)
f_global, x_global = psum_over(everyone)
with jax.thread_guard(True), concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    refused = pool.submit(f_global, x_global)
result["again_refused"] = attempt(refused.result)
# Process 0's devices at place 1 of color 3: 0 in f_global's group, 1 in this one's.
other = [everyone[0], everyone[2], everyone[1], everyone[3]]
other += [everyone[4], everyone[6], everyone[5], everyone[7]]
g_global, y_global = psum_over(other)
kept_too = g_global.lower(y_global).compile()
result["again"] = attempt(lambda: f_global(x_global))
print("RESULT " + json.dumps(result), flush=True)
