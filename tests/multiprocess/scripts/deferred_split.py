"""jit programs whose two collective groups start with the same device and hold two of a
process's devices at one place, 4 CPU devices per process, never naming jax_accl.

The mesh ("x", "y") lays each process's devices out as rows (d0 d1), (d2 d3): a group
over "x" is [0 2 2048 2050], one over "y" [0 1], so device 0's threads and devices 1
and 2 split (color 0, key 1) alike, for two different groups (as jax's pjit_test
test_sharded_mul does at 2 processes x 4 devices).

matmul: a @ a.T of an int32 (8, 2) array sharded ("x", "y"): XLA's partitioner
all-gathers over "x" and all-reduces over "y" (plain jit, no shard_map).
matmul_f32: the same in float32.
gathers: on the mesh with each process's rows swapped (groups new to XLA), a shard_map
all-gathering over "y", then over "x" (one kind, two counts).
same_calls: a shard_map psum over "x", then over "y", of one element each: the two
groups' calls are alike (an MPI_Allreduce of one int32), so which device asks cannot be
told from the first call: refused when compiled.

Prints ``RESULT <json>``: each program's shards (or its error), the kinds and counts of
XLA's collectives in its compiled HLO, and the MPI calls it made in this process."""

import json

import jax
import jax.numpy as jnp
import job_start  # scripts/job_start.py, beside this one
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

args = job_start.join(devices=4)

from jax_accl.hlo_text import xla_collectives_in  # noqa: E402  (a leaf: imports no jax_accl)

ids = sorted(jax.devices(), key=lambda d: d.id)
mesh = jax.sharding.Mesh(np.array(ids).reshape(-1, 2), ("x", "y"))
# Each process's rows as (d3 d2), (d1 d0): groups over "x" [3 1 2051 2049], over "y"
# [3 2], new to XLA (its communicators are kept per group), both starting with device 3.
rows = np.array(ids).reshape(-1, 2, 2)[:, ::-1, ::-1].reshape(-1, 2)
swapped = jax.sharding.Mesh(rows, ("x", "y"))


calls = job_start.xla_calls


def run(name, f, x):
    before = calls()
    try:
        compiled = jax.jit(f).lower(x).compile()
        kinds = {k: v["ops"] for k, v in xla_collectives_in(compiled.as_text()).items()}
        y = jax.block_until_ready(compiled(x))
    except Exception as e:  # jax_accl's refusal at loading
        result[name] = f"{type(e).__name__}: {e}"
        return
    after = calls()
    made = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    shards = sorted(
        ([[i.start, i.stop] for i in s.index], np.asarray(s.data).tolist())
        for s in y.addressable_shards
    )
    result[name] = {"shards": shards, "kinds": kinds, "calls": made}


def array(dtype, on=mesh):
    data = np.arange(16).reshape(8, 2).astype(dtype)
    sharding = NamedSharding(on, P("x", "y"))
    return jax.make_array_from_callback(data.shape, sharding, lambda i: data[i])


def in_shard_map(body, on=mesh):
    return jax.shard_map(body, mesh=on, in_specs=P("x", "y"), out_specs=P(), check_vma=False)


result = {"process_id": jax.process_index()}
run("matmul", lambda a: a @ a.T, array(np.int32))
run("matmul_f32", lambda a: a @ a.T, array(np.float32))
run(
    "gathers",
    in_shard_map(
        lambda v: jax.lax.all_gather(
            jax.lax.all_gather(v, "y", axis=1, tiled=True), "x", axis=0, tiled=True
        ),
        swapped,
    ),
    array(np.int32, swapped),
)
run(
    "same_calls",
    in_shard_map(lambda v: jax.lax.psum(jax.lax.psum(jnp.sum(v), "x") * 3, "y")),
    array(np.int32),
)
print("RESULT " + json.dumps(result), flush=True)
