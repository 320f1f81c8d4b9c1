"""Test set-up: 8 CPU devices in this process, before JAX initialises its backend."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_ACCL_TIMEOUT_S", "60")
# The default cost model, whatever `bench --calibrate` stored on this machine.
import tempfile  # noqa: E402

os.environ["JAX_ACCL_CACHE"] = tempfile.mkdtemp(prefix="jax_accl_test_cache_")
