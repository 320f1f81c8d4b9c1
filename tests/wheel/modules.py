"""Run by scripts/test_wheel.sh in a fresh environment holding only the wheel (and jax):
every module the wheel ships imports, but those of the tools whose extra (demo: optax,
bench: matplotlib) is not installed, which must fail for that reason only; the tests'
harness (_accl_testing and jax_accl.testing's workers) is not in it."""

import importlib
import pkgutil
import sys

import jax_accl

HARNESS = {
    "jax_accl._accl_testing",
    "jax_accl.testing.worker",
    "jax_accl.testing.jit_worker",
    "jax_accl.testing.reuse_worker",
    "jax_accl.testing.fast_wire_worker",
    "jax_accl.testing.async_loop",
    "jax_accl.testing.ragged",
    "jax_accl.testing.threads",
}
EXTRAS = {"optax", "matplotlib"}  # what the demo and bench extras install

names = sorted(m.name for m in pkgutil.walk_packages(jax_accl.__path__, "jax_accl."))
shipped = HARNESS & set(names)
if shipped:
    sys.exit(f"FAILED: the wheel ships the tests' harness: {sorted(shipped)}")
for name in names:
    if name.endswith("__main__") or name.rsplit(".", 1)[1].startswith("libjax_accl"):
        continue  # running a tool is its test (importing one runs it); the native libraries
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name not in EXTRAS:
            sys.exit(f"FAILED: {name} does not import: {e}")
print(f"modules: {len(names)} shipped, every one imports (tools' extras aside), no harness")
