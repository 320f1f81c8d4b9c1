"""Counters of the native core, for ``jax_accl.stats()``."""

from jax_accl import _accl


def stats() -> dict:
    """Counters since start (or the last ``reset_stats()``) in this process:

    * ``algorithms``: {name: {"calls", "bytes", "seconds", "errors"}};
    * ``collectives``: the same per collective: ``"all-reduce"``, ``"reduce-scatter"``,
      ``"all-gather"``, ``"permute"``, ``"all-to-all"``, ``"ragged-all-to-all"``,
      ``"broadcast"``, ``"reduce"``
      (``bytes``: each call's operand);
    * ``transports``: {"memory" | "shm" | "tcp:<interface>": {"bytes_sent",
      "bytes_received", "messages_sent"}}, one entry per transport and per rail;
    * ``phase_seconds``: time in each phase of the hierarchical all-reduce;
    * ``streamed_segments``: {"pair", "ring"}: the all-reduce segments (one per rank and
      segment) begun streamed, two ranks' halves chunk by chunk or the ring's blocks
      piece by piece, each piece forwarded as it arrives;
    * ``refused_connections``: connections refused for a wrong secret or protocol;
    * ``communicator_lookups``: groups across processes looked up in the process table's
      registry (each group once, at its first call; not reset by ``reset_stats()``);
    * ``cma_fallbacks``: calls between processes of one host planned for cross-memory
      attach that ran another schedule because it was refused (a group's first such call
      probes it and learns; its later calls plan without it); not reset by
      ``reset_stats()``;
    * ``recoveries``: epochs the groups of this process started after a failed call
      (``jax_accl.recovery``); not reset by ``reset_stats()``;
    * ``calls_in_flight``, ``max_calls_in_flight``: calls begun and not completed,
      now and the most at once;
    * ``call_sites``: jax_accl calls of the executables alive now, each made when XLA
      instantiates its executable and freed with it; not reset by ``reset_stats()``;
    * ``reduce_isa``: the instruction set of the reduce kernels;
    * ``stripes_per_rail``: the job's TCP connections per rail and peer and why
      (jax_accl.distributed.stripes_per_rail; {} in a job of one process).
    """
    from jax_accl import distributed

    return {
        **_accl.stats(),
        "reduce_isa": _accl.reduce_isa(),
        "stripes_per_rail": distributed.stripes_per_rail(),
    }


def reset_stats() -> None:
    _accl.reset_stats()
