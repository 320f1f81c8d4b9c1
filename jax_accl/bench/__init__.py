"""All-reduce benchmark in the nccl-tests convention, jax_accl against jax.lax.psum.

    python -m jax_accl.bench [--sizes 4KiB,1MiB,16MiB] [--devices 8] [--json out.jsonl]

For every size it times, in the same run, K and 2K all-reduces chained in one jitted
lax.fori_loop, each feeding the next and nothing else in the loop; the difference over
K is the time of one all-reduce with everything paid once per call (dispatch, the copy
of the argument into the loop, page faults of fresh buffers) cancelled out. That for
jax.lax.psum and for jax_accl with each algorithm, the repetitions going round the
variants so that the machine's slow spells hit all alike; it reports time per op, algbw = S/t
and busbw = algbw·2(n-1)/n, the ratio to psum and the memory limit t_min = 2·n·S/B
(B: copy bandwidths measured here, NumPy's and a non-temporal one, both on every core).
Every row checks its result against NumPy.

Modules: cli (the command line and the jobs it launches), sweep (what is measured),
timing (how one all-reduce is timed), memory (the memory limit), report (tables, plots),
mpi (the mpi4jax baseline), calibrate (``--calibrate``: the cost model's constants),
progress (what runs now, on stderr).
"""
