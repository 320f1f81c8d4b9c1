"""How the benchmark times one all-reduce: K and 2K of them chained in one jitted
lax.fori_loop, the difference over K, repetitions interleaved across the variants."""

from __future__ import annotations

import math
import random
import resource
import statistics
import time

import jax

# A multi-process run's bound: long, but a hung worker still ends it with everyone's output.
JOB_TIMEOUT_S = 3600.0


def cpu_seconds() -> float:
    """This process's CPU time so far, user + system, over all its threads (the device
    threads, jax_accl's and gloo's transport threads included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def call_seconds(fn, arg) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(arg))
    return time.perf_counter() - start


def median_call_seconds(fn, arg, reps: int) -> float:
    call_seconds(fn, arg)  # compile and warm up
    return statistics.median(call_seconds(fn, arg) for _ in range(reps))


def barrier(name: str) -> None:
    """Every process of the job here before the next timed call (else a process's time
    includes waiting for a peer still busy with the previous one)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def median_seconds_in_step(call, reps: int, warm_ups: int, name: str) -> float:
    """The median time of `call()` (its results waited for) over `reps` calls, each
    started by every process together (barrier `name`), after `warm_ups` untimed ones."""
    return statistics.median(interleaved_seconds_in_step({"": call}, reps, warm_ups, name)[""])


def interleaved_seconds_in_step(calls: dict, reps: int, warm_ups: int, name: str) -> dict:
    """{variant: [seconds of each round]}: every round times each `calls[variant]()` once
    (results waited for, every process started together by barrier `name`), the variants
    in a new seeded order each round, after `warm_ups` untimed calls of each; so a slow
    spell of the machine hits every variant of a round alike."""
    for call in calls.values():
        for _ in range(warm_ups):  # compile, warm up
            jax.block_until_ready(call())
    times = {variant: [] for variant in calls}
    for rep in range(reps):
        order = list(calls)
        random.Random(rep).shuffle(order)  # seeded: every process runs the same order
        for variant in order:
            barrier(name)
            start = time.perf_counter()
            jax.block_until_ready(calls[variant]())
            times[variant].append(time.perf_counter() - start)
    return times


def warm_up_calls(size_bytes: int, loop: int) -> int:
    """(short, long) pairs to run before timing: about 1,500 all-reduces for small sizes
    and 512 MiB of them for large ones. The first thousand or so calls of a process run
    up to 2x slower (8 processes x 1 device, 4 KiB: 377 us per op in the first 1,200,
    about 200 us afterwards), so the variant timed first would lose. A count, not a
    time: every process of a job must run the same number of collectives."""
    ops = min(1500, max(3 * loop, (512 << 20) // max(size_bytes, 1)))
    return max(1, math.ceil(ops / (3 * loop)))


def per_op_interleaved(chains: dict, arg, loop: int, reps: int, size_bytes: int):
    """({name: seconds per op}, {name: CPU seconds per op}) of every variant {name:
    (short, long)}. Seconds per all-reduce: the median of (time
    of `long` - time of `short`) / loop, where `long` chains 2·loop all-reduces and
    `short` loop. After a warm-up of each, the repetitions go round the variants in a
    new order each round (in a fixed order, the variant after jax.lax.psum's gloo ran
    1.1-1.8x slower than itself elsewhere), so a slow spell of the machine (they last
    seconds here) and whatever a variant leaves behind hit all of them alike. Where the
    noise hides the difference (a median of 5% of `long` / 2·loop or less), that upper
    bound, dispatch included, rather than a zero. CPU seconds per op: this process's CPU
    time (cpu_seconds) over a variant's timed calls, divided by the all-reduces they ran
    (3·loop a repetition), so dispatch included."""
    for short, long in chains.values():
        for _ in range(warm_up_calls(size_bytes, loop)):  # the first also compiles
            call_seconds(short, arg), call_seconds(long, arg)
    differences = {name: [] for name in chains}
    longs = {name: [] for name in chains}
    cpu = dict.fromkeys(chains, 0.0)
    for rep in range(reps):
        order = list(chains)
        random.Random(rep).shuffle(order)  # seeded: every process runs the same order
        for name in order:
            short, long = chains[name]
            cpu_before = cpu_seconds()
            longs[name].append(call_seconds(long, arg))
            differences[name].append((longs[name][-1] - call_seconds(short, arg)) / loop)
            cpu[name] += cpu_seconds() - cpu_before
    result = {}
    for name in chains:
        difference = statistics.median(differences[name])
        upper_bound = statistics.median(longs[name]) / (2 * loop)
        result[name] = difference if difference > 0.05 * upper_bound else upper_bound
    return result, {name: cpu[name] / (3 * loop * reps) for name in chains}


def chain_length(size_bytes: int, loop: int, n: int) -> int:
    """K, the all-reduces chained per call: --loop, or by size (more for small ones),
    capped so that the chained sums stay finite."""
    loop = loop or max(4, min(50, (256 << 20) // max(size_bytes, 1) // 8))
    return max(1, min(loop, max_chain(n) // 2))


# Chained sums multiply the values by n per step; |inputs| <= 8 keeps 8·n^steps finite
# in float32 for this many steps (n = 8; more for smaller groups).
def max_chain(n: int) -> int:
    return int(math.log(3e38 / 8) / math.log(max(n, 2)))
