"""jax_accl's MPI library called as XLA:CPU's MPI layer calls it, from the device threads
of one process of 4 CPU devices, for a program whose groups [0 1] (an all-reduce of 8
int32) and [0 2] (an all-gather of 4 int32) put devices 1 and 2 at place 1 of color 0.

bound: device 1's thread splits (0, 1): a provisional communicator, rank 1 and size 2;
its first call, an all-reduce of 3 elements, fits neither group (an error naming both);
its next, an all-reduce of 8 int32, binds it to [0 1] and sums with device 0's thread
(whose split (0, 0) is [0 1]'s, the first of the program's order). Then device 2's
split (0, 1) is [0 2]'s at once ([0 1]'s place 1 is held), and its all-gather with
device 0 runs.

Prints ``RESULT <json>``."""

import ctypes
import json
import threading

import jax
import job_start  # scripts/job_start.py, beside this one
import numpy as np

args = job_start.join(devices=4)

from jax_accl import xla_collectives, xla_subsets  # noqa: E402

lib = ctypes.CDLL(str(xla_collectives.LIBRARY))


def handle(name):
    return ctypes.c_size_t(ctypes.c_size_t.in_dll(lib, name).value)


WORLD, INT32, SUM = handle("MPIABI_COMM_WORLD"), handle("MPIABI_INT32_T"), handle("MPIABI_SUM")
xla_subsets.note_groups(
    [0, 1, 2, 3],
    [[0, 1], [0, 2]],
    subset=False,
    collectives={(0, 1): [("all-reduce", "s32", 8)], (0, 2): [("all-gather", "s32", 4)]},
)
result: dict = {"process_id": jax.process_index()}


def error_string(code: int) -> str:
    text, length = ctypes.create_string_buffer(1024), ctypes.c_int()
    lib.MPIABI_Error_string(code, text, ctypes.byref(length))
    return text.value.decode()


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def device(name, key, first, count, gather=False):
    comm = ctypes.c_size_t()
    lib.MPIABI_Comm_split(WORLD, 0, key, ctypes.byref(comm))
    rank, size = ctypes.c_int(-1), ctypes.c_int(-1)
    lib.MPIABI_Comm_rank(comm, ctypes.byref(rank))
    lib.MPIABI_Comm_size(comm, ctypes.byref(size))
    mine = {"rank": rank.value, "size": size.value}
    if first is not None:
        x = np.zeros(first, np.int32)
        mine["first"] = error_string(lib.MPIABI_Allreduce(ptr(x), ptr(x), first, INT32, SUM, comm))
    x = np.arange(count, dtype=np.int32) + 100 * key
    if gather:
        y = np.zeros(2 * count, np.int32)
        code = lib.MPIABI_Allgather(ptr(x), count, INT32, ptr(y), count, INT32, comm)
    else:
        y = np.zeros(count, np.int32)
        code = lib.MPIABI_Allreduce(ptr(x), ptr(y), count, INT32, SUM, comm)
    mine["code"], mine["out"] = code, y.tolist()
    result[name] = mine


for pair in (
    [("device1", 1, 3, 8), ("device0", 0, None, 8)],
    [("device2", 1, None, 4, True), ("device0_gather", 0, None, 4, True)],
):
    threads = [threading.Thread(target=device, args=a) for a in pair]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
print("RESULT " + json.dumps(result), flush=True)
