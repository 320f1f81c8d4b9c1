"""Demo: all-reduce on 8 CPU devices with jax_accl, checked against jax.lax.psum.

    python -m jax_accl.demo
"""
from __future__ import annotations

import sys
import time


def main() -> int:
    import jax
    jax.config.update("jax_num_cpu_devices", 8)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_accl

    mesh = jax.make_mesh((8,), ("data",))
    print(f"jax {jax.__version__}, {len(jax.devices())} CPU devices, mesh {dict(mesh.shape)}")
    for size in (1 << 10, 1 << 20, 16 << 20):
        count = size // 4
        host = np.random.default_rng(0).integers(-100, 100, (8, count)).astype(np.float32)
        x = jax.device_put(host, NamedSharding(mesh, P("data")))
        timings = {}
        results = {}
        for name, reduce in (("jax.lax.psum", jax.lax.psum), ("jax_accl.psum", jax_accl.psum)):
            fn = jax.jit(jax.shard_map(lambda a, r=reduce: r(a, "data"), mesh=mesh,
                                       in_specs=P("data"), out_specs=P()))
            results[name] = np.asarray(fn(x))
            samples = []
            for _ in range(7):
                start = time.perf_counter()
                jax.block_until_ready(fn(x))
                samples.append(time.perf_counter() - start)
            timings[name] = sorted(samples)[len(samples) // 2]
        same = np.array_equal(results["jax.lax.psum"], results["jax_accl.psum"])
        print(f"{size / 1024:>8.0f} KiB per device: identical to jax.lax.psum: {same}; "
              f"psum {timings['jax.lax.psum'] * 1e3:7.2f} ms, "
              f"jax_accl {timings['jax_accl.psum'] * 1e3:7.2f} ms "
              f"({timings['jax.lax.psum'] / timings['jax_accl.psum']:.2f}x)")
        if not same:
            return 1
    print("algorithms used:", {k: v["calls"] for k, v in jax_accl.stats()["algorithms"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
