"""``python -m jax_accl.run script.py [args ...]`` (or ``-m module [args ...]``): runs a
script with jax_accl as XLA:CPU's collectives backend (JAX_ACCL_XLA_COLLECTIVES=1),
even one that imports jax before jax_accl or never imports jax_accl at all.

jaxlib reads the MPI library it loads when jax is imported, so the launcher sets the
environment (which its children inherit) and starts the interpreter again, where
jax_accl is imported first."""

from __future__ import annotations

import os
import runpy
import sys

from jax_accl import config, xla_collectives


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help") or (argv[0] == "-m" and len(argv) < 2):
        print(__doc__.strip())
        raise SystemExit(0 if argv else 2)
    if not xla_collectives.enabled():
        if xla_collectives.requested():  # the interpreter started again, and still off
            raise SystemExit("jax_accl.run: jax_accl could not become XLA's collectives backend")
        config.set_environment("JAX_ACCL_XLA_COLLECTIVES", "1")
        os.execv(sys.executable, [sys.executable, "-m", "jax_accl.run", *argv])
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
