"""_compat.hook_distributed_state: jax_accl's side follows jax.distributed's state
whichever way it is initialized or shut down (the method every path reaches, again after
a shutdown), and _compat.hook_loading sees each program jax loads (compiled or
deserialized). The state's real
methods are replaced by stand-ins here (no coordinator)."""

import jax
import jax.numpy as jnp
import pytest
from jax._src import distributed as jax_distributed

from jax_accl import _compat


def test_every_initialization_and_shutdown_of_the_global_state_runs_the_hooks(monkeypatch):
    events = []
    monkeypatch.setattr(
        jax_distributed.State, "initialize", lambda self, *a, **k: events.append(("init", a))
    )
    monkeypatch.setattr(jax_distributed.State, "shutdown", lambda self: events.append("shutdown"))
    _compat.hook_distributed_state(
        after_initialize=lambda: events.append("started"),
        before_shutdown=lambda: events.append("stopping"),
    )
    _compat.hook_distributed_state(after_initialize=lambda: events.append("second hook"))
    state = jax_distributed.global_state
    state.initialize("h:1", 2, 0)
    state.shutdown()
    state.initialize("h:1", 2, 0)  # again after a shutdown
    jax_distributed.State().initialize("h:2", 1, 0)  # not the global state: no hook
    assert events == [
        ("init", ("h:1", 2, 0)),
        "started",
        "second hook",
        "stopping",
        "shutdown",
        ("init", ("h:1", 2, 0)),
        "started",
        "second hook",
        ("init", ("h:2", 1, 0)),
    ]


def test_an_error_of_the_initialization_hook_is_the_initializations(monkeypatch):
    monkeypatch.setattr(jax_distributed.State, "initialize", lambda self, *a, **k: None)

    def refuse():
        raise RuntimeError("refused by the hook")

    _compat.hook_distributed_state(after_initialize=refuse)
    with pytest.raises(RuntimeError, match="refused by the hook"):
        jax_distributed.global_state.initialize("h:1", 2, 0)


def test_the_loading_hook_sees_each_program_and_its_devices(monkeypatch):
    """A jitted program once (with jnp.ones's), and a deserialized one, which compiles
    nothing (serialize_executable.deserialize_and_load: an AOT or compile cache)."""
    from jax._src.interpreters import pxla
    from jax.experimental import serialize_executable

    monkeypatch.setattr(pxla.UnloadedMeshExecutable, "load", pxla.UnloadedMeshExecutable.load)
    compiled = jax.jit(lambda x: jnp.cos(x) * 5.0).lower(jnp.ones(4)).compile()
    payload = serialize_executable.serialize(compiled)
    seen = []
    _compat.hook_loading(lambda devices, executable: seen.append((devices, executable)))
    jax.jit(lambda x: jnp.sin(x) * 3.0)(jnp.ones(4)).block_until_ready()
    loaded = serialize_executable.deserialize_and_load(
        *payload, execution_devices=jax.devices()[:1]
    )
    texts = [_compat.compiled_text(executable) for _, executable in seen]
    assert sum(" sine(" in t for t in texts) == 1, texts  # the jitted program, once
    assert sum(" cosine(" in t for t in texts) == 1, texts  # the deserialized one
    for devices, _ in seen:  # and jnp.ones's, each with its devices
        assert [d.id for d in devices] == [jax.devices()[0].id]
    assert float(loaded(jnp.ones(4))[0]) == float(jnp.cos(1.0) * 5.0)


def test_the_coordinators_service_stops_a_grace_after_its_client(monkeypatch):
    """The service outlives the clients leaving after the shutdown barrier (a late RPC
    during the gRPC server's shutdown can abort the coordinator)."""
    import time

    stopped = []

    class Service:
        address = "h:1"

        def shutdown(self):
            stopped.append(time.perf_counter())

    state = jax_distributed.global_state
    monkeypatch.setattr(state, "service", Service())
    _compat.delay_service_shutdown(0.2)
    _compat.delay_service_shutdown(0.2)  # once: the grace is not doubled
    assert state.service.address == "h:1"
    start = time.perf_counter()
    state.service.shutdown()
    assert len(stopped) == 1 and 0.19 <= stopped[0] - start < 0.39
    monkeypatch.setattr(state, "service", None)
    _compat.delay_service_shutdown(0.2)  # a process without the service: nothing
    assert state.service is None
