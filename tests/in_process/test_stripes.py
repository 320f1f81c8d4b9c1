"""The job's stripes (jax_accl.stripes) without a job: the rule that turns the probe's two
rates into connections per rail, the probe's streams over loopback, and process 0's
answer agreed through a stand-in for jax.distributed's key-value store."""

import threading

import pytest

from jax_accl import stripes
from jax_accl.errors import AcclError


@pytest.mark.parametrize(
    "one,many,want",
    [
        (238e6, 923e6, 4),  # 1 Gbit/s capped at 250 per flow (iperf3's rates on that wire)
        (289e6, 287e6, 1),  # tbf at 300: one flow fills it
        (1e9, 1.45e9, 1),  # under STRIPES_PAY_MIN
        (1e9, 1.6e9, 2),
        (1e8, 2.05e9, stripes.PROBE_FLOWS),  # more would pay: at most the flows probed
        (0.0, 1e9, 1),  # nothing measured: one
    ],
)
def test_the_gain_of_several_flows_sets_the_connections(one, many, want):
    assert stripes.stripes_for(one, many) == want


def test_the_probe_streams_over_loopback_and_decides_by_its_rule():
    receiver = stripes.Receiver("127.0.0.1", timeout_s=30, congestion="")
    try:
        rate = stripes.stream_rate("127.0.0.1", receiver.address, 3, 0.02, 30, "")
        found = stripes.probe("127.0.0.1", receiver.address, 30, "reno", budget_s=60)
        # A probe past its budget stops (the job then keeps one stripe) rather than
        # outlast the other processes' wait for its answer.
        with pytest.raises(TimeoutError, match="longer than 0 s"):
            stripes.probe("127.0.0.1", receiver.address, 30, "reno", budget_s=0)
    finally:
        receiver.close()
    assert rate > 0
    assert found["flows"] == stripes.PROBE_FLOWS
    assert found["one_flow_bytes_per_s"] > 0 and found["many_flows_bytes_per_s"] > 0
    assert found["stripes"] == stripes.stripes_for(
        found["one_flow_bytes_per_s"], found["many_flows_bytes_per_s"]
    )


def test_a_probe_nobody_answers_is_an_error():
    receiver = stripes.Receiver("127.0.0.1", timeout_s=30, congestion="")
    address = receiver.address
    receiver.close()
    with pytest.raises(OSError):
        stripes.stream_rate("127.0.0.1", address, 2, 0.01, 5, "")


class Store:
    """jax.distributed's key-value store as agree() uses it, shared by threads."""

    def __init__(self):
        self.values = {}
        self.changed = threading.Condition()

    def key_value_set(self, key, value):
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def wait(self, key, timeout_s=30):
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.values, timeout_s):
                raise AcclError(f"nobody set {key}")
            return self.values[key]


def agree_all(hosts, setting, live=None):
    """Every live process's agree() on its thread (`live`: the processes, default all):
    [choice of process i, None for one not live]."""
    store, out, errors = Store(), [None] * len(hosts), []
    live = list(range(len(hosts))) if live is None else live

    def one(i):
        try:
            out[i] = stripes.agree(
                store, "test", i, live, hosts[i], "127.0.0.1", setting, store.wait
            )
        except Exception as e:  # reported below, with the process
            errors.append((i, e))

    threads = [threading.Thread(target=one, args=(i,)) for i in live]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return out


def test_every_process_takes_process_0s_probe():
    choices = agree_all(["a", "a", "b"], "auto")
    assert choices[0]["why"] == "probe"
    assert all(c == choices[0] for c in choices)


def test_after_a_restart_only_the_live_processes_agree():
    # Process 1 is not live (a restart among the others, jax_accl.membership): process 0
    # probes to process 3, the first live one on another host, never waiting for 1.
    choices = agree_all(["a", "b", "a", "b"], "auto", live=[0, 2, 3])
    assert choices[1] is None and choices[0]["why"] == "probe"
    assert choices[2] == choices[0] and choices[3] == choices[0]


def test_one_host_or_a_count_needs_no_probe():
    assert agree_all(["a", "a"], "auto") == [{"stripes": 1, "why": "one host"}] * 2
    assert agree_all(["a"], "auto") == [{"stripes": 1, "why": "one process"}]
    assert agree_all(["a", "b"], 3) == [{"stripes": 3, "why": "JAX_ACCL_STRIPES_PER_RAIL"}] * 2


def test_the_receiver_listens_in_jax_accl_ports_or_says_none_is_free():
    taken = stripes.Receiver("127.0.0.1", timeout_s=30, congestion="")
    port = int(taken.address.rsplit(":", 1)[1])
    try:
        with pytest.raises(OSError, match=f"JAX_ACCL_PORTS={port}-{port}"):
            stripes.Receiver("127.0.0.1", 30, "", ports=(port, port))
        # The next port, if free (another program may hold it: then nothing to see).
        try:
            other = stripes.Receiver("127.0.0.1", 30, "", ports=(port, port + 1))
        except OSError:
            return
        assert other.address == f"127.0.0.1:{port + 1}"
        other.close()
    finally:
        taken.close()


def test_a_partner_that_cannot_listen_leaves_one_stripe_saying_why(monkeypatch):
    def refuse(*args, **kw):
        raise OSError("no free port in JAX_ACCL_PORTS=1-1 on 127.0.0.1")

    monkeypatch.setattr(stripes, "Receiver", refuse)
    choices = agree_all(["a", "b"], "auto")
    assert choices[0] == choices[1]
    assert choices[0]["stripes"] == 1
    assert "process 1 could not listen: no free port" in choices[0]["why"]
