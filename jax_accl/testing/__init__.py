"""Helpers for jax_accl's tests, its benchmark and users' own tests; the library never
imports them.

launch: start a job of several JAX processes (jax.distributed), optionally inside
        network namespaces, and collect their results;
netns:  namespaced "hosts" with several rails each (root), removed afterwards;
threads: the native core without XLA, one thread per rank (the native test tier);
worker: a process of the jobs of jax_accl's multi-process tests (python -m).
"""
