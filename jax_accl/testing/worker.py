"""One process of a multi-process test job of jax_accl's tests, as
``launch.run_job(["-m", "jax_accl.testing.worker", "--scenario", name, ...], ...)``.

Joins the job through jax.distributed, runs the scenario named on the command line over
a global mesh of every process's devices, checks jax_accl against jax.lax.psum over
JAX's gloo collectives (bound to a rail across network namespaces) or against NumPy, and
prints one line "RESULT <json>" with what it measured. Importing it joins no job: main() does
(python -m runs it).
"""

import argparse
import json
import os
import subprocess
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jax_accl

parser = argparse.ArgumentParser()
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--num-processes", type=int, required=True)
parser.add_argument("--coordinator", required=True)
parser.add_argument("--devices", type=int, required=True)
parser.add_argument("--scenario", required=True)
parser.add_argument("--reference", choices=["gloo", "numpy"], default="gloo")
parser.add_argument(
    "--gloo-interface",
    default="",
    help="bind gloo to this interface (network namespaces share a hostname)",
)
parser.add_argument("--bytes", type=int, default=1 << 20)
parser.add_argument("--reps", type=int, default=5)
parser.add_argument(
    "--fail-every",
    type=int,
    default=0,
    help="soak: after every n-th call, one the processes call differently (must raise)",
)
parser.add_argument(
    "--profile-dir",
    default="",
    help="afterwards, trace one 1 MiB all-reduce with jax_accl.profiler",
)
parser.add_argument(
    "--exit",
    choices=["shutdown", "interpreter"],
    default="shutdown",
    help="exit_in_flight: how process 0 leaves",
)
parser.add_argument(
    "--signal-dir",
    default="",
    help="siege: process 0 writes its listeners to ports.json here; runs until 'done' appears",
)
# Set by join(): the command line, the job's processes and devices per process, every
# device of the job (by process), and the mesh over them.
args = None
NP = ND = 0
DEVICES: list = []
MESH_2D = None
ALL = ("p", "d")


def join(argv=None):
    """Parses the command line and joins the job: this process's devices, jax.distributed
    and, for the gloo reference, gloo bound to its interface."""
    global args, NP, ND, DEVICES, MESH_2D
    args = parser.parse_args(argv)
    jax.config.update("jax_num_cpu_devices", args.devices)
    if args.reference == "gloo":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        initialization_timeout=60,
    )
    if args.gloo_interface:
        from jax_accl import _compat

        _compat.use_gloo_on_interface(args.gloo_interface)
    NP, ND = args.num_processes, args.devices
    DEVICES = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    MESH_2D = Mesh(np.array(DEVICES).reshape(NP, ND), ("p", "d"))  # p spans processes


def global_input(shape_per_device, dtype, seed):
    """Deterministic data for every device (the same on every process), stacked."""
    rng = np.random.default_rng(seed)
    shape = (NP * ND, *shape_per_device)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def place(x, spec):
    sharding = NamedSharding(MESH_2D, spec)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def local_blocks(array):
    """This process's shards, ordered by device id, as NumPy."""
    return [np.asarray(s.data) for s in sorted(array.addressable_shards, key=lambda s: s.device.id)]


def allreduce_program(lib, axes, **kw):
    def body(x):
        return lib.allreduce(x, axes, **kw) if kw else lib.psum(x, axes)

    return jax.jit(
        jax.shard_map(body, mesh=MESH_2D, in_specs=P(ALL), out_specs=P(ALL), check_vma=False)
    )


def expected_numpy(x, axes):
    """psum over `axes` of the stacked per-device data x[(p*ND + d)]."""
    grid = x.reshape(NP, ND, *x.shape[1:]).astype(np.float64 if x.dtype.kind == "f" else x.dtype)
    if "p" in axes:
        grid = np.broadcast_to(grid.sum(0, keepdims=True), grid.shape)
    if "d" in axes:
        grid = np.broadcast_to(grid.sum(1, keepdims=True), grid.shape)
    return grid.reshape(x.shape).astype(x.dtype)


def check(name, got, want):
    for g, w in zip(local_blocks(got), want):
        if g.dtype.kind in "iu":
            if not np.array_equal(g, w):
                raise AssertionError(f"{name}: integer result differs from the reference")
        else:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=name)


def reference(x_global, axes, placed):
    if args.reference == "gloo":
        return local_blocks(allreduce_program(jax.lax, axes)(placed))
    want = expected_numpy(x_global, axes)
    mine = [i for i, d in enumerate(DEVICES) if d.process_index == jax.process_index()]
    return [want[i : i + 1] for i in mine]


def check_sweep(axes_list, algorithms) -> int:
    """int32 (bitwise) and float32 at 1 to 300,001 elements over each axes of `axes_list`
    with each algorithm (direct only up to 1000), then a fused pytree of mixed leaves in
    one program, all against the reference; returns the number of checks."""
    checks = 0
    for dtype in (np.int32, np.float32):
        for elements in (1, 1000, 300_001):
            x = global_input((elements,), dtype, seed=elements)
            placed = place(x, P(ALL))
            for axes in axes_list:
                want = reference(x, axes, placed)
                for algorithm in algorithms:
                    if algorithm == "direct" and elements > 1000:
                        continue
                    got = allreduce_program(jax_accl, axes, algorithm=algorithm)(placed)
                    check(f"{dtype.__name__} x{elements} over {axes} ({algorithm})", got, want)
                    checks += 1
    xs = [global_input((n,), np.int32, seed=n) for n in (3, 4096, 70_000)]
    placed = [place(x, P(ALL)) for x in xs]
    fused = jax.jit(
        jax.shard_map(
            lambda *t: jax_accl.psum(t, ALL),
            mesh=MESH_2D,
            in_specs=(P(ALL),) * 3,
            out_specs=(P(ALL),) * 3,
            check_vma=False,
        )
    )(*placed)
    for x, p_, got in zip(xs, placed, fused):
        check("fused pytree", got, reference(x, ALL, p_))
        checks += 1
    return checks


def scenario_correctness():
    return {
        "checks": check_sweep(
            (ALL, "p", "d"), ("auto", "hierarchical", "ring", "halving_doubling", "direct")
        )
    }


def scenario_every_collective():
    """One int32 array of 1 MiB per device (large enough to stripe over every connection
    of a rail) through each collective over every device of the job: all-reduce as the
    runtime chooses, hierarchical and ring; reduce-scatter then all-gather; a ppermute
    shift; an all-to-all; each bitwise jax.lax's over gloo."""
    n = NP * ND
    x = global_input((n * 65536,), np.int32, seed=7)
    placed = place(x, P(ALL))
    want = reference(x, ALL, placed)
    checks = 0
    for algorithm in ("auto", "hierarchical", "ring"):
        got = allreduce_program(jax_accl, ALL, algorithm=algorithm)(placed)
        check(f"all-reduce ({algorithm})", got, want)
        checks += 1
    bodies = {
        "reduce-scatter, all-gather": lambda lib, v: lib.all_gather(
            lib.psum_scatter(v[0], ALL, tiled=True) * 2, ALL, tiled=True
        )[None],
        "ppermute": lambda lib, v: lib.ppermute(v * 3, ALL, [(i, (i + 1) % n) for i in range(n)]),
        "all-to-all": lambda lib, v: lib.all_to_all(v[0] + 1, ALL, 0, 0, tiled=True)[None],
    }
    for name, body in bodies.items():

        def program(lib, body=body):
            return jax.jit(
                jax.shard_map(
                    lambda v: body(lib, v), mesh=MESH_2D, in_specs=P(ALL), out_specs=P(ALL)
                )
            )

        check(name, program(jax_accl)(placed), local_blocks(program(jax.lax)(placed)))
        checks += 1
    return {"checks": checks}


def scenario_scatter_gather():
    """psum_scatter then all_gather (tiled and not, along dimensions 0 and 1), ppermute
    (a shift, and one pair: zeros elsewhere) and all_to_all (tiled and not), over every
    axes of the job's mesh, int32 (bitwise) and float32, small and large, against
    jax.lax's over gloo; the compiled steps hold jax_accl's calls and no XLA one."""
    checks = 0
    for dtype in (np.int32, np.float32):
        for rows in (NP * ND, NP * ND * 4096):
            x = global_input((rows, 3), dtype, seed=rows)
            placed = place(x, P(ALL))
            for axes in (ALL, "p", "d"):
                for tiled, dim in ((True, 0), (True, 1), (False, 0)):

                    def body(lib, v, axes=axes, tiled=tiled, dim=dim):
                        v = v[0]  # this device's (rows, 3)
                        n = NP * ND if axes == ALL else (NP if axes == "p" else ND)
                        v = v if tiled else v[:n]  # untiled: the scatter dimension is n
                        v = jnp.moveaxis(v, 0, 1) if dim == 1 else v
                        s = lib.psum_scatter(v, axes, scatter_dimension=dim, tiled=tiled)
                        return lib.all_gather(s * 2, axes, axis=dim, tiled=tiled)[None]

                    def program(lib, body=body):
                        return jax.jit(
                            jax.shard_map(
                                lambda v: body(lib, v),
                                mesh=MESH_2D,
                                in_specs=P(ALL),
                                out_specs=P(ALL),
                            )
                        )

                    ours = program(jax_accl)
                    got, want = ours(placed), program(jax.lax)(placed)
                    name = f"{dtype.__name__} x{rows} over {axes} tiled={tiled} dim={dim}"
                    check(name, got, local_blocks(want))
                    text = ours.lower(placed).compile().as_text()
                    if "all-gather(" in text or "reduce-scatter(" in text:
                        raise AssertionError(f"{name}: XLA's collective is left in the step")
                    checks += 1
                n = NP * ND if axes == ALL else (NP if axes == "p" else ND)
                shift = [(i, (i + 1) % n) for i in range(n)]
                partial = [(0, n - 1)] if n > 1 else [(0, 0)]
                for perm in (shift, partial):

                    def permuted(lib, perm=perm, axes=axes):
                        return jax.jit(
                            jax.shard_map(
                                lambda v: lib.ppermute(v * 3, axes, perm),
                                mesh=MESH_2D,
                                in_specs=P(ALL),
                                out_specs=P(ALL),
                            )
                        )

                    name = f"{dtype.__name__} x{rows} ppermute over {axes} {perm}"
                    ours = permuted(jax_accl)
                    check(name, ours(placed), local_blocks(permuted(jax.lax)(placed)))
                    if "collective-permute" in ours.lower(placed).compile().as_text():
                        raise AssertionError(f"{name}: XLA's collective-permute is left")
                    checks += 1
                for tiled, concat in ((True, 1), (False, 0)):

                    def exchanged(lib, axes=axes, tiled=tiled, concat=concat, n=n):
                        def body(v):
                            v = v[0] if tiled else v[0][:n]  # untiled: the split dimension is n
                            return lib.all_to_all(v + 1, axes, 0, concat, tiled=tiled)[None]

                        return jax.jit(
                            jax.shard_map(body, mesh=MESH_2D, in_specs=P(ALL), out_specs=P(ALL))
                        )

                    name = f"{dtype.__name__} x{rows} all_to_all over {axes} tiled={tiled}"
                    ours = exchanged(jax_accl)
                    check(name, ours(placed), local_blocks(exchanged(jax.lax)(placed)))
                    if "all-to-all(" in ours.lower(placed).compile().as_text():
                        raise AssertionError(f"{name}: XLA's all-to-all is left")
                    checks += 1
    return {"checks": checks + check_fused_pytree() + check_ragged()}


def scenario_all_to_all_tiers():
    """all_to_all over every device, forced direct, forced by host (JAX_ACCL_ALGORITHM)
    and the runtime's choice, int32 (bitwise) and float32, small blocks and blocks of
    256 KiB and more, tiled along dimension 0 and untiled into dimension 1, against
    jax.lax's over gloo; counts the calls that ran by host under each setting."""
    checks, by_host_calls = 0, {}
    for forced in ("direct", "hierarchical", "auto"):
        os.environ["JAX_ACCL_ALGORITHM"] = forced
        before = jax_accl.stats()["algorithms"].get("hierarchical", {}).get("calls", 0)
        for dtype in (np.int32, np.float32):
            for rows in (NP * ND, NP * ND * NP * ND * 8192):
                placed = place(global_input((rows, 2), dtype, seed=rows + 1), P(ALL))
                for tiled, concat in ((True, 0), (False, 1)):

                    def exchanged(lib, tiled=tiled, concat=concat):
                        def body(v):
                            v = v[0] if tiled else v[0][: NP * ND]
                            return lib.all_to_all(v * 5, ALL, 0, concat, tiled=tiled)[None]

                        return jax.jit(
                            jax.shard_map(body, mesh=MESH_2D, in_specs=P(ALL), out_specs=P(ALL))
                        )

                    name = f"{forced}: {dtype.__name__} x{rows} all_to_all tiled={tiled}"
                    want = local_blocks(exchanged(jax.lax)(placed))
                    check(name, exchanged(jax_accl)(placed), want)
                    checks += 1
        after = jax_accl.stats()["algorithms"].get("hierarchical", {}).get("calls", 0)
        by_host_calls[forced] = after - before
    del os.environ["JAX_ACCL_ALGORITHM"]
    return {"checks": checks, "by_host_calls": by_host_calls}


def check_ragged() -> int:
    """ragged_all_to_all over every device (two slices per peer, some empty) against the
    NumPy reference of its semantics; the compiled step holds jax_accl's call (XLA:CPU
    has none)."""
    from jax_accl.testing import ragged

    n = NP * ND
    sizes = ragged.layout(n, seed=46, per_peer=2, rows=8 * n, out_rows=8 * n + 4)
    operand = global_input((8 * n, 3), np.int32, seed=47)
    output = np.full((n, 8 * n + 4, 3), -1, np.int32)

    def body(operand, output, *sizes):
        result = jax_accl.ragged_all_to_all(
            operand[0], output[0], *(s[0] for s in sizes), axis_name=ALL
        )
        return result[None]

    step = jax.jit(jax.shard_map(body, mesh=MESH_2D, in_specs=(P(ALL),) * 6, out_specs=P(ALL)))
    placed = [place(a, P(ALL)) for a in (operand, output, *sizes)]
    want = place(ragged.reference(operand, output, *sizes), P(ALL))
    check("ragged_all_to_all", step(*placed), local_blocks(want))
    if 'custom_call_target="accl_ragged_all_to_all"' not in step.lower(*placed).compile().as_text():
        raise AssertionError("ragged_all_to_all: jax_accl's call is not in the step")
    return 1


def check_fused_pytree() -> int:
    """A pytree of int32 leaves (three shapes, one large) and a float32 one through
    psum_scatter, all_gather, ppermute and all_to_all: one call per dtype each in the compiled step,
    every leaf bitwise jax.lax's."""
    x = global_input((NP * ND * 4096, 3), np.int32, seed=7)
    placed = place(x, P(ALL))
    shift = [(i, (i + 1) % (NP * ND)) for i in range(NP * ND)]

    def program(lib):
        def body(v):
            v = v[0]
            tree = {"a": v, "b": v[: NP * ND] * 3, "c": v[:, :1], "f": (v // 5).astype(np.float32)}
            gathered = lib.all_gather(lib.psum_scatter(tree, ALL, tiled=True), ALL, tiled=True)
            moved = lib.all_to_all(lib.ppermute(gathered, ALL, shift), ALL, 0, 0, tiled=True)
            return tuple(moved[k][None] for k in sorted(moved))

        return jax.jit(jax.shard_map(body, mesh=MESH_2D, in_specs=P(ALL), out_specs=(P(ALL),) * 4))

    ours = program(jax_accl)
    for k, got, want in zip("abcf", ours(placed), program(jax.lax)(placed)):
        check(f"fused pytree leaf {k}", got, local_blocks(want))
    text = ours.lower(placed).compile().as_text()
    for target in ("accl_reduce_scatter", "accl_all_gather", "accl_ppermute", "accl_all_to_all"):
        calls = text.count(f'custom_call_target="{target}"')
        if calls != 2:
            raise AssertionError(f"fused pytree: {calls} {target} calls, not one per dtype")
    return 4


def rooted_program(lib, axes, root):
    """broadcast, reduce (sum) and reduce (max) from/to `root` along `axes`: jax_accl's, or
    (lib jax.lax) the psum-of-a-masked-value formulation a JAX user writes."""

    def body(v):
        v = v[0]
        if lib is jax_accl:
            outs = (
                jax_accl.broadcast(v, axes, root),
                jax_accl.reduce(v, axes, root),
                jax_accl.reduce(v, axes, root, op="max"),
            )
        else:
            at_root = jax.lax.axis_index(axes) == root
            outs = (
                jax.lax.psum(jnp.where(at_root, v, 0), axes),
                jnp.where(at_root, jax.lax.psum(v, axes), 0),
                jnp.where(at_root, jax.lax.pmax(v, axes), 0),
            )
        return tuple(o[None] for o in outs)

    return jax.jit(jax.shard_map(body, mesh=MESH_2D, in_specs=P(ALL), out_specs=(P(ALL),) * 3))


def scenario_rooted():
    """broadcast and reduce across the job's processes (shared memory on one host, TCP
    between hosts): over every device and over "p" alone, a root in the last process and
    one in the first, small and large (from 64 KiB) buffers, int32 (bitwise) and float32:
    each result the jax.lax formulation's; the compiled step holds jax_accl's calls and
    no XLA all-reduce."""
    checks = 0
    for axes, root in ((ALL, NP * ND - 1), ("p", 0)):
        for dtype in (np.int32, np.float32):
            for rows in (3, 20_000):
                placed = place(global_input((rows, 2), dtype, seed=rows + root), P(ALL))
                ours = rooted_program(jax_accl, axes, root)
                wants = rooted_program(jax.lax, axes, root)(placed)
                for what, got, want in zip(("broadcast", "sum", "max"), ours(placed), wants):
                    check(
                        f"{what} {axes} root {root} {dtype.__name__} x{rows}",
                        got,
                        local_blocks(want),
                    )
                    checks += 1
                text = ours.lower(placed).compile().as_text()
                calls = ("accl_broadcast", "accl_reduce")
                if "all-reduce(" in text or not all(f'target="{t}"' in text for t in calls):
                    raise AssertionError("rooted: the step is not jax_accl's calls alone")
    return {"checks": checks}


def scenario_exact_scatter():
    """jax-ml/jax#40830's case: psum_scatter of float64 over every device, 4 MiB chunks
    (--bytes), --reps calls with fresh data each (integer-valued, so every sum is exact):
    jax_accl's result must equal NumPy's bit for bit every time. jax.lax's over gloo is
    counted, not asserted (the issue reports it wrong now and then)."""
    jax.config.update("jax_enable_x64", True)  # float64 as the issue's; jax's default is 32-bit
    n = NP * ND
    chunk = args.bytes // 8
    base = global_input((n * chunk,), np.int32, seed=40830).astype(np.float64)
    want = base.sum(0).reshape(n, chunk)  # device k keeps block k

    def program(lib):
        body = lambda v, i: lib.psum_scatter(v[0] + i, ALL, tiled=True)[None]  # noqa: E731
        return jax.jit(jax.shard_map(body, mesh=MESH_2D, in_specs=(P(ALL), P()), out_specs=P(ALL)))

    placed = place(base, P(ALL))
    if placed.dtype != np.float64 or placed.addressable_shards[0].data.nbytes != n * args.bytes:
        raise AssertionError(f"the operand is {placed.dtype}, not float64 chunks of --bytes")
    ours, theirs = program(jax_accl), program(jax.lax)
    first_device = jax.process_index() * ND
    gloo_wrong = 0
    for i in range(args.reps):
        shift = np.float64(i)
        blocks = local_blocks(ours(placed, shift))
        gloo = local_blocks(theirs(placed, shift))
        for d, (got, lax_got) in enumerate(zip(blocks, gloo)):
            expected = want[first_device + d] + n * shift
            if not np.array_equal(got[0], expected):
                bad = int(np.sum(got[0] != expected))
                raise AssertionError(f"call {i}: {bad} of {chunk} sums differ from NumPy's")
            gloo_wrong += int(not np.array_equal(lax_got[0], expected))
    return {"checks": args.reps, "gloo_wrong_calls": gloo_wrong}


def scenario_hierarchy():
    """The hierarchy over every device, automatic and forced."""
    return {"checks": check_sweep((ALL,), ("auto", "hierarchical"))}


def scenario_many_hosts():
    """Between many hosts (issue 49): what the plan runs between them (halving-doubling
    for small slices, the streamed ring for large ones) and the flat ring and
    halving-doubling forced, int32 bitwise and float32, against the reference."""
    checks = 0
    for dtype, sizes in ((np.int32, (1, 1000, 16_384, 600_001)), (np.float32, (600_001,))):
        for elements in sizes:
            x = global_input((elements,), dtype, seed=elements)
            placed = place(x, P(ALL))
            want = reference(x, ALL, placed)
            for algorithm in ("auto", "ring", "halving_doubling"):
                got = allreduce_program(jax_accl, ALL, algorithm=algorithm)(placed)
                check(f"{dtype.__name__} x{elements} ({algorithm})", got, want)
                checks += 1
    return {"checks": checks}


def timed(fn, x):
    out = fn(x)
    out.block_until_ready()
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        fn(x).block_until_ready()
        times.append(time.perf_counter() - start)
    return out, float(np.median(times))


def scenario_bandwidth():
    """One large all-reduce over every device, timed; results checked; stats reported."""
    elements = args.bytes // 4
    x = global_input((elements,), np.float32, seed=7)
    placed = place(x, P(ALL))
    jax_accl.reset_stats()
    got, seconds = timed(allreduce_program(jax_accl, ALL), placed)
    stats = jax_accl.stats()
    check("bandwidth run", got, reference(x, ALL, placed))
    result = {"seconds": seconds, "stats": stats}
    if args.reference == "gloo":
        _, result["gloo_seconds"] = timed(allreduce_program(jax.lax, ALL), placed)
    return result


def scenario_survive_kill():
    """The last process SIGKILLs itself in the middle of a loop of all-reduces; every
    survivor must raise an error naming what happened, promptly, and not hang."""
    import signal

    x = global_input((256 * 1024,), np.float32, seed=3)
    placed = place(x, P(ALL))
    step = allreduce_program(jax_accl, ALL)
    step(placed).block_until_ready()
    victim = NP - 1
    for i in range(1000):
        if i == 3 and jax.process_index() == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.perf_counter()
        try:
            step(placed).block_until_ready()
        except Exception as e:  # jax raises XlaRuntimeError / JaxRuntimeError
            return {
                "error": str(e),
                "seconds_to_error": time.perf_counter() - start,
                "iteration": i,
            }
    return {"error": None}


def profile_events():
    """This process's native events of one 1 MiB all-reduce, read back from its profile
    (the plane jax_accl adds to the XSpace of the session)."""
    x = global_input((1 << 18,), np.float32, seed=5)
    placed = place(x, P(ALL))
    step = allreduce_program(jax_accl, ALL)
    step(placed).block_until_ready()
    log_dir = os.path.join(args.profile_dir, f"process{jax.process_index()}")
    with jax_accl.profiler.trace(log_dir) as traced:
        step(placed).block_until_ready()
    return [
        {
            "name": e["name"],
            "tid": e["device"],
            "ts": e["start_ns"] / 1000,
            "dur": e["duration_ns"] / 1000,
            "bytes": e["bytes"],
        }
        for e in jax_accl.profiler.native_events(traced.xplane)
    ]


def scenario_soak():
    """--reps random all-reduces (sizes, dtypes, ops, axes, algorithms from a pool of
    compiled programs), each checked; reports the growth of resident memory. With
    --fail-every n, after every n-th call one that differs between the processes
    (process 0 ring, the others direct), which must raise on every process; the calls
    after it must still be exact."""
    rng = np.random.default_rng(11)  # the same sequence on every process
    programs = []
    for k in range(12):
        axes = [ALL, "p", "d"][k % 3]
        dtype = [np.int32, np.float32, np.int64][k % 3]
        op = ["sum", "max", "min"][k % 3]
        algorithm = ["auto", "ring", "halving_doubling", "direct"][k % 4]
        elements = int(rng.integers(1, (1 << 20) // 8))
        fn = jax.jit(
            jax.shard_map(
                lambda x, a=axes, o=op, al=algorithm: jax_accl.allreduce(x, a, op=o, algorithm=al),
                mesh=MESH_2D,
                in_specs=P(ALL),
                out_specs=P(ALL),
                check_vma=False,
            )
        )
        programs.append((fn, axes, dtype, op, elements))

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    faulty = allreduce_program(
        jax_accl, ALL, algorithm="ring" if jax.process_index() == 0 else "direct"
    )
    faults = {"injected": 0, "raised": 0}
    baseline = None
    for i in range(args.reps):
        if args.fail_every and i % args.fail_every == args.fail_every - 1:
            faults["injected"] += 1
            try:
                faulty(place(global_input((777,), np.int32, seed=i), P(ALL))).block_until_ready()
            except Exception as e:
                faults["raised"] += "jax_accl" in str(e)
        fn, axes, dtype, op, elements = programs[rng.integers(len(programs))]
        x = global_input((elements,), dtype, seed=int(rng.integers(1 << 30)))
        x = np.abs(x) % 64 if op == "sum" else x  # exact in float32
        got = fn(place(x, P(ALL)))
        grid = x.reshape(NP, ND, elements)
        reduce = {"sum": np.sum, "max": np.max, "min": np.min}[op]
        if "p" in axes:
            grid = np.broadcast_to(reduce(grid, axis=0, keepdims=True), grid.shape)
        if "d" in axes:
            grid = np.broadcast_to(reduce(grid, axis=1, keepdims=True), grid.shape)
        want = grid.reshape(NP * ND, elements).astype(dtype)
        mine = [k for k, d in enumerate(DEVICES) if d.process_index == jax.process_index()]
        check(f"soak call {i}", got, [want[k : k + 1] for k in mine])
        if i == args.reps // 5:
            baseline = rss_mib()
    return {
        "calls": args.reps,
        "rss_growth_mib": rss_mib() - (baseline or rss_mib()),
        "faults": faults,
        "recoveries": jax_accl.stats()["recoveries"],
    }


def scenario_mismatch():
    """Process 0 runs ring, the others direct: the same psum, different calls on the
    wire. Every rank must raise (not hang, not return garbage)."""
    x = global_input((4096,), np.float32, seed=1)
    algorithm = "ring" if jax.process_index() == 0 else "direct"
    start = time.perf_counter()
    try:
        allreduce_program(jax_accl, ALL, algorithm=algorithm)(place(x, P(ALL))).block_until_ready()
    except Exception as e:
        return {"error": str(e), "seconds_to_error": time.perf_counter() - start}
    return {"error": None}


def scenario_plan_mismatch():
    """One 4 MiB int32 all-reduce over every device, as this process's settings plan it
    (the test gives the processes different JAX_ACCL_PIPELINE_CHUNKS or
    JAX_ACCL_ALGORITHM): exact, or the error it raised and how long that took."""
    exact, _, _ = checked_psum(1 << 20, seed=19)
    start = time.perf_counter()
    try:
        exact("4 MiB psum")
    except Exception as e:
        return {"error": str(e), "seconds_to_error": time.perf_counter() - start}
    return {"error": None, "seconds": time.perf_counter() - start}


def scenario_large_call():
    """One 16 MiB all-reduce: checked against NumPy, or the error it raised."""
    x = global_input((4 << 20,), np.float32, seed=2)
    start = time.perf_counter()
    try:
        got = allreduce_program(jax_accl, ALL)(place(x, P(ALL)))
        check("16 MiB psum", got, expected_numpy(x, ALL))
    except Exception as e:
        return {"error": str(e), "seconds_to_error": time.perf_counter() - start}
    return {"error": None}


def scenario_exit_at_once():
    """--reps all-reduces of --bytes (int32, each checked exact), then the process leaves
    at once (jax.distributed.shutdown, which stops jax_accl first): ranks that finish the
    last call early close their connections while slower ranks still finish theirs,
    which must complete (a peer that finished and left has not failed the call)."""
    exact, _, _ = checked_psum(args.bytes // 4, seed=23)
    for call in range(args.reps):
        exact(f"call {call}")
    return {"calls": args.reps}


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def checked_psum(elements, seed):
    """jax_accl's psum over every device of int32 data, jitted: (run, step, placed), where
    run(label) calls it once and checks the result exact (NumPy, bitwise)."""
    x = global_input((elements,), np.int32, seed=seed)
    want = expected_numpy(x, ALL)
    mine = [k for k, d in enumerate(DEVICES) if d.process_index == jax.process_index()]
    placed = place(x, P(ALL))
    step = allreduce_program(jax_accl, ALL)

    def run(label):
        check(label, step(placed), [want[k : k + 1] for k in mine])

    return run, step, placed


def announce_listeners(of_process=0):
    """Process 0 writes the rails' listeners of process `of_process` to
    <signal-dir>/ports.json: the job runs."""
    if jax.process_index() != 0:
        return
    rails = jax_accl.distributed.topology()[of_process]["rails"]
    path = os.path.join(args.signal_dir, "ports.json")
    with open(path + ".tmp", "w") as f:
        json.dump([[ip, port] for _, ip, port, _ in rails], f)
    os.rename(path + ".tmp", path)


def scenario_recover():
    """--reps rounds: a failed call (the processes call different algorithms, or
    different shapes), which must raise on every process, then correct calls, which must
    be exact (int32 bitwise) on fresh channels. Reports the errors seen, the recoveries,
    and the descriptors and /dev/shm segments left (nothing may grow)."""
    from jax_accl import _accl_testing

    me = jax.process_index()
    exact, good, placed = checked_psum(3000, seed=7)
    by_algorithm = allreduce_program(jax_accl, ALL, algorithm="ring" if me == 0 else "direct")
    # Another shape on the last process: its global array is another array.
    y = global_input((3000 if me != NP - 1 else 1500,), np.int32, seed=8)
    by_shape, placed_y = good, place(y, P(ALL))
    exact("first call")
    errors, fds = [], []
    for i in range(args.reps):
        bad, arg = (by_algorithm, placed) if i % 2 == 0 else (by_shape, placed_y)
        try:
            bad(arg).block_until_ready()
            errors.append(None)
        except Exception as e:
            errors.append(str(e))
        for k in range(3):
            exact(f"round {i}, call {k} after the failure")
        fds.append(open_fds())
    return {
        "errors": errors,
        "recoveries": jax_accl.stats()["recoveries"],
        "fds": fds,
        # This process's own (other jobs' may be named beside it: tests run side by side).
        "shm_segments": len(_accl_testing.shm_names_left()),
    }


def scenario_abort():
    """Process 0 waits in a call that the last process joins only 4 s later; a thread of
    process 0 calls jax_accl.abort() after 1 s. Process 0's call must fail then, naming
    abort(); the late process's call must fail (its channels were poisoned); the next
    calls on both must recover and be exact."""
    import threading

    me = jax.process_index()
    exact, step, placed = checked_psum(5000, seed=9)
    exact("before")
    if me == 0:
        threading.Timer(1.0, jax_accl.abort).start()
    elif me == NP - 1:
        time.sleep(4.0)
    start = time.perf_counter()
    error = None
    try:
        step(placed).block_until_ready()
    except Exception as e:
        error = str(e)
    seconds = time.perf_counter() - start
    exact("after")
    exact("after, again")
    return {
        "error": error,
        "seconds_to_error": seconds,
        "recoveries": jax_accl.stats()["recoveries"],
    }


def scenario_unstarted_devices():
    """Every device but each process's first skips the psum (a cond on the device's index
    in its process): the first ones wait, across processes, for devices of their own
    process that make no call of the launch, as where XLA:CPU never started the launch on
    them (issue 47; xla_ffi/runtime/stall.h). With a 60 s timeout the call must fail within
    about 10 s naming them."""
    return unstarted_devices(lambda: jax.lax.axis_index("d") == 0)


def scenario_unstarted_in_last_process():
    """As unstarted_devices, but only the last process's devices but its first skip the
    psum: the other processes' devices all call and wait for devices that never come, in
    a process that is not theirs. The last process names them after about 10 s; the
    others' calls must fail then too (a peer of theirs failed the call), not at the 60 s
    timeout."""
    return unstarted_devices(
        lambda: (jax.lax.axis_index("p") != NP - 1) | (jax.lax.axis_index("d") == 0)
    )


def unstarted_devices(calls):
    """A psum that the devices where `calls()` (traced in the body) is false skip."""
    exact, _, placed = checked_psum(5000, seed=11)
    exact("before")  # every device has made a call: the process's own devices are known

    def body(x):
        return jax.lax.cond(calls(), lambda v: jax_accl.psum(v, ALL) + 0 * v, lambda v: v, x)

    program = jax.jit(
        jax.shard_map(body, mesh=MESH_2D, in_specs=P(ALL), out_specs=P(ALL), check_vma=False)
    )
    start = time.perf_counter()
    error = None
    try:
        program(placed).block_until_ready()
    except Exception as e:
        error = str(e)
    # (Not followed by another call: after a call some devices never took part in, the
    # next call of the job waits for them whether it ended by this or by jax_accl.abort().)
    return {"error": error, "seconds_to_error": time.perf_counter() - start}


def scenario_concurrent():
    """--reps launches of one program with four all-reduces of different sizes and dtypes
    and no data dependency among them (buckets in flight together), beside compute;
    every result checked bitwise against NumPy. Reports the most calls seen in flight."""
    shapes = [
        ((300_001,), np.int32),
        ((70_000,), np.int8),
        ((1 << 18,), np.int64),
        ((999,), np.int32),
    ]
    xs = [global_input(shape, dtype, seed=k) for k, (shape, dtype) in enumerate(shapes)]
    xs[1] = (xs[1] % 7).astype(np.int8)  # int8 sums of 4 ranks stay exact
    placed = [place(x, P(ALL)) for x in xs]
    mine = [k for k, d in enumerate(DEVICES) if d.process_index == jax.process_index()]
    wants = [expected_numpy(x, ALL) for x in xs]

    def body(a, b, c, d):
        m = jnp.full((64, 64), 0.01, jnp.float32)
        for _ in range(6):
            m = jnp.tanh(m @ m)
        return tuple(jax_accl.psum(v, ALL) for v in (a, b, c, d)) + (m,)

    program = jax.jit(
        jax.shard_map(
            body,
            mesh=MESH_2D,
            in_specs=(P(ALL),) * 4,
            out_specs=(P(ALL),) * 4 + (P(),),
            check_vma=False,
        )
    )
    for rep in range(args.reps):
        outs = program(*placed)
        for k, (got, want) in enumerate(zip(outs, wants)):
            check(f"launch {rep}, all-reduce {k}", got, [want[i : i + 1] for i in mine])
    return {"max_calls_in_flight": jax_accl.stats()["max_calls_in_flight"]}


def scenario_late_after_failure():
    """The issue's reproduction: a call of different shapes (it raises everywhere), then
    the last process reaches the next call 8 s late (the deadline is 5 s), then steps 1
    to 5 on every process, each all-reducing the value `step`. A step's result is exact
    or the step raised: never another step's data. Meanwhile a thread calls
    jax_accl.stats() every 50 ms: it must never block on the recovery."""
    import threading

    me = jax.process_index()
    _, _, _ = checked_psum(3000, seed=7)
    program = allreduce_program(jax_accl, ALL)
    bad = place(global_input((3000 if me != NP - 1 else 1500,), np.int32, seed=8), P(ALL))
    slowest, stop = [0.0], threading.Event()

    def poll_stats():
        while not stop.is_set():
            start = time.perf_counter()
            jax_accl.stats()
            slowest[0] = max(slowest[0], time.perf_counter() - start)
            time.sleep(0.05)

    poller = threading.Thread(target=poll_stats, daemon=True)
    poller.start()
    outcomes = []
    try:
        program(bad).block_until_ready()
        outcomes.append("no error")
    except Exception:
        outcomes.append("raised")
    if me == NP - 1:
        time.sleep(8.0)
    for step in range(1, 6):
        x = place(np.full((NP * ND, 1000), step, np.int32), P(ALL))
        try:
            got = {int(v) for block in local_blocks(program(x)) for v in block.ravel()}
            outcomes.append("exact" if got == {step * NP * ND} else f"wrong: {sorted(got)}")
        except Exception as e:
            outcomes.append(f"raised: {str(e)[:200]}")
    stop.set()
    poller.join()
    return {"outcomes": outcomes, "slowest_stats_s": slowest[0]}


def scenario_late_peer():
    """A warm-up all-reduce, then the last process sleeps 25 s (a checkpoint) before the
    next 64 MiB-per-device all-reduce; the deadline is 120 s: every call exact."""
    exact, _, _ = checked_psum(16 << 20, seed=11)
    exact("warm-up")
    if jax.process_index() == NP - 1:
        time.sleep(25.0)
    start = time.perf_counter()
    exact("after the late peer")
    waited = time.perf_counter() - start
    exact("next")
    return {"waited_s": waited}


def scenario_late_first_call():
    """Process 0 sleeps 15 s (a slow start) before the job's first all-reduce, which
    connects its channels: its peers, which accept process 0's connections, wait past
    the 10 s after which they probe its listeners (answered: it is only late). Every
    call exact; reports how long the call took and the refused connections."""
    exact, _, _ = checked_psum(1 << 18, seed=19)
    if jax.process_index() == 0:
        time.sleep(15.0)
    start = time.perf_counter()
    exact("first call")
    waited = time.perf_counter() - start
    exact("next")
    return {"waited_s": waited, "refused": jax_accl.stats()["refused_connections"]}


def scenario_exit_in_flight():
    """Process 0 leaves (--exit: jax.distributed.shutdown(), or the interpreter's exit
    alone) while its call waits for the last process, which comes 3 s later. Process 0
    must exit cleanly and promptly (its call ended, never a World destroyed under it);
    the late process's call must raise, naming jax_accl, not wait out its deadline."""
    import sys

    exact, step, placed = checked_psum(1 << 18, seed=17)
    exact("warm-up")
    if jax.process_index() == 0:
        pending = step(placed)  # dispatched; its call waits for the late peer
        time.sleep(0.5)
        waiting = jax_accl.stats()["calls_in_flight"]
        result = {"calls_in_flight": waiting, "process": 0}
        if args.exit == "shutdown":
            start = time.perf_counter()
            jax.distributed.shutdown()
            result["shutdown_s"] = time.perf_counter() - start
            try:  # the call that was in flight: ended by the shutdown
                pending.block_until_ready()
                result["pending_error"] = None
            except Exception as e:
                result["pending_error"] = str(e)
        del pending
        print("RESULT " + json.dumps(result), flush=True)
        sys.exit(0)  # atexit stops jax_accl (if still running), then jax.distributed
    time.sleep(3.0)
    start = time.perf_counter()
    try:
        exact("the late call")
        error = None
    except Exception as e:
        error = str(e)
    return {"error": error, "seconds_to_error": time.perf_counter() - start}


def scenario_siege():
    """All-reduces, each checked exact (int32, 1 MiB), while a stranger floods process 0's
    listeners; process 0 first writes its rails' addresses to <signal-dir>/ports.json,
    and the job runs until <signal-dir>/done appears (at most 180 s)."""
    from jax_accl import _compat

    me = jax.process_index()
    exact, _, _ = checked_psum(1 << 18, seed=12)
    exact("before the siege")
    announce_listeners()
    calls, start = 0, time.monotonic()
    while time.monotonic() - start < 180:
        exact(f"call {calls} under siege")
        calls += 1
        # Every process stops after the same call: process 0 decides, the store tells.
        done = os.path.exists(os.path.join(args.signal_dir, "done")) if me == 0 else False
        flag = f"siege/{calls}"
        client = _compat.distributed_client()
        if me == 0:
            client.key_value_set(flag, "1" if done else "0")
            if done:
                break
        elif client.blocking_key_value_get(flag, 60_000) == "1":
            break
    return {"calls": calls, "refused": jax_accl.stats()["refused_connections"]}


def scenario_lockout():
    """Process 0 publishes the last process's listeners before any call (it accepts the
    job's connections: the lower device id connects), then every process waits until
    <signal-dir>/held appears (a stranger holds silent connections to them); then exact
    calls (the job's first connections), a failed call (the processes call different
    algorithms) and exact calls after it (the recovery's new connections), all while the
    stranger holds on."""
    from jax_accl import _compat

    me = jax.process_index()
    jax_accl.distributed.ensure_started()
    announce_listeners(of_process=NP - 1)
    client = _compat.distributed_client()
    if me == 0:
        while not os.path.exists(os.path.join(args.signal_dir, "held")):
            time.sleep(0.1)
        client.key_value_set("lockout/held", "1")
    else:
        client.blocking_key_value_get("lockout/held", 120_000)
    exact, _, placed = checked_psum(1 << 16, seed=14)
    start = time.monotonic()
    for k in range(3):
        exact(f"call {k}, the job's first connections under siege")
    first_calls_s = time.monotonic() - start
    bad = allreduce_program(jax_accl, ALL, algorithm="ring" if me == 0 else "direct")
    error = None
    try:
        bad(placed).block_until_ready()
    except Exception as e:
        error = str(e)
    for k in range(3):
        exact(f"call {k} after the failure, on the recovery's connections")
    stats = jax_accl.stats()
    return {
        "error": error,
        "recoveries": stats["recoveries"],
        "first_calls_s": first_calls_s,
        "refused": stats["refused_connections"],
    }


def scenario_until_error():
    """All-reduces of 1 MiB, each checked, until one raises (at most 180 s); process 0
    first writes <signal-dir>/ports.json to say it runs. Reports when the error came
    (wall clock) and what it said."""
    exact, _, _ = checked_psum(1 << 18, seed=13)
    exact("first call")
    announce_listeners()
    calls, start = 0, time.monotonic()
    while time.monotonic() - start < 180:
        try:
            exact(f"call {calls}")
        except Exception as e:
            return {"error": str(e), "error_at": time.time(), "calls": calls}
        calls += 1
    return {"error": None, "calls": calls}


def scenario_first_call():
    """One 1 MiB all-reduce, the job's first (its channels connect in it), checked:
    reports its error (None if it was exact), how long it took and the rails' listeners
    of every process."""
    exact, _, _ = checked_psum(1 << 18, seed=17)
    start = time.monotonic()
    try:
        exact("first call")
        error = None
    except Exception as e:
        error = str(e)
    ports = [[port for _, _, port, _ in p["rails"]] for p in jax_accl.distributed.topology()]
    return {"error": error, "seconds": time.monotonic() - start, "ports": ports}


def scenario_late_at_prompt():
    """The job's last device waits LATE_S in a host callback before a psum, as at a
    debugger's prompt (jax.debug.breakpoint waits so for its input, which needs a
    terminal; this callback waits on an event nobody sets): its process's other device,
    and every device of the other processes, wait for it, and the sum is exact (issue 59;
    the test sets JAX_ACCL_STALL_S=2, which must not take the device for stalled)."""
    return late_device_psum(lambda: threading.Event().wait(LATE_S))


def scenario_stopped_and_continued():
    """The job's last device computes in a host callback (3 s of CPU) while its process is
    stopped (SIGSTOP) for 8 s by a shell it starts (after 2 s: the stall check has looked
    at the waiting call by then), then continued: the psum after it is exact; the
    process's own stall check, waking after the stop, must not read the time it was
    stopped as idleness (issue 59)."""

    def stopped_while_computing():
        pid = os.getpid()
        subprocess.Popen(["sh", "-c", f"sleep 2; kill -STOP {pid}; sleep 8; kill -CONT {pid}"])
        began = time.thread_time()
        while time.thread_time() - began < 3.0:
            pass

    return late_device_psum(stopped_while_computing)


LATE_S = 9.0


def late_device_psum(late):
    """A psum over every device of int32 data after a host callback in which the job's
    last device calls late() (the others pass their shard on), run twice, late the second
    time only (every device has made a call: the process's own devices are known): the
    error, if any, and the seconds the second run took, its result checked exact on this
    process's devices."""
    n = NP * ND
    x = np.arange(4 * n, dtype=np.int32)
    want = x.reshape(n, 4).sum(axis=0)

    runs = []

    def callback(shard):
        if shard[0] == 4 * (n - 1) and len(runs) == 2:  # the last device's, second run
            late()
        return shard

    def body(a):
        fetched = io_callback(callback, jax.ShapeDtypeStruct(a.shape, a.dtype), a)
        return jax_accl.psum(fetched, ALL)

    program = jax.jit(
        jax.shard_map(body, mesh=MESH_2D, in_specs=P(ALL), out_specs=P(ALL), check_vma=False)
    )
    placed = place(x, P(ALL))
    error = None
    try:
        for _ in range(2):
            runs.append(None)
            start = time.monotonic()
            for shard in program(placed).addressable_shards:
                np.testing.assert_array_equal(np.asarray(shard.data), want)
    except Exception as e:
        error = str(e)
    return {"error": error, "seconds": time.monotonic() - start}


SCENARIOS = {
    "exit_in_flight": scenario_exit_in_flight,
    "lockout": scenario_lockout,
    "concurrent": scenario_concurrent,
    "unstarted_devices": scenario_unstarted_devices,
    "unstarted_in_last_process": scenario_unstarted_in_last_process,
    "late_after_failure": scenario_late_after_failure,
    "late_peer": scenario_late_peer,
    "late_first_call": scenario_late_first_call,
    "late_at_prompt": scenario_late_at_prompt,
    "stopped_and_continued": scenario_stopped_and_continued,
    "until_error": scenario_until_error,
    "first_call": scenario_first_call,
    "siege": scenario_siege,
    "recover": scenario_recover,
    "abort": scenario_abort,
    "correctness": scenario_correctness,
    "every_collective": scenario_every_collective,
    "bandwidth": scenario_bandwidth,
    "survive_kill": scenario_survive_kill,
    "soak": scenario_soak,
    "mismatch": scenario_mismatch,
    "plan_mismatch": scenario_plan_mismatch,
    "hierarchy": scenario_hierarchy,
    "many_hosts": scenario_many_hosts,
    "scatter_gather": scenario_scatter_gather,
    "all_to_all_tiers": scenario_all_to_all_tiers,
    "exact_scatter": scenario_exact_scatter,
    "rooted": scenario_rooted,
    "large_call": scenario_large_call,
    "exit_at_once": scenario_exit_at_once,
}


def main(argv=None):
    from jax_accl import _accl, _compat

    join(argv)
    ptracer_before = _accl.cross_memory_attach_allowed()
    result = SCENARIOS[args.scenario]()
    # Whether this process let its peers ptrace it: before any call, and after them.
    result["ptracer"] = [ptracer_before, _accl.cross_memory_attach_allowed()]
    # Whether the job's secret is still in jax.distributed's store: process 0 deleted
    # it at start-up (asked there only: the others may outlive the coordinator).
    if jax.process_index() == 0:
        try:
            _compat.distributed_client().key_value_try_get("jax_accl/v1/secret")
            result["secret_in_store"] = True
        except Exception:
            result["secret_in_store"] = False
    if args.profile_dir:
        result["trace"] = profile_events()
    result["process"] = jax.process_index()
    result.setdefault("stats", jax_accl.stats())
    result["cost_model"] = _accl.get_cost_model()  # what this process planned by
    result["topology"] = jax_accl.distributed.topology()
    if args.scenario in ("survive_kill", "mismatch", "plan_mismatch"):
        print("RESULT " + json.dumps(result), flush=True)
        os._exit(0)  # a peer is gone: jax.distributed's shutdown barrier would wait for it
    jax.distributed.shutdown()
    # jax.distributed's shutdown stops jax_accl too: the ptrace permission goes with it.
    result["ptracer_after_shutdown"] = _accl.cross_memory_attach_allowed()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
