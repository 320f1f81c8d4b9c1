"""Helpers for jax_accl's tests, its benchmark and users' own tests; the library never
imports them.

launch: start a job of several JAX processes (jax.distributed), optionally inside
        network namespaces, and collect their results;
netns:  namespaced "hosts" with several rails each (root), removed afterwards;
threads: the native core without XLA, one thread per rank (the native test tier);
worker (and jit_worker, reuse_worker, fast_wire_worker, async_loop, ragged): a process
        of the jobs of jax_accl's multi-process tests (python -m).

The wheel ships launch and netns only (the bench and the demos use them); the others are
the tests' harness, in checkout builds (scripts/build_wheel.sh).
"""
