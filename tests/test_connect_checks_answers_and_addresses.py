"""connect() against peers that are not serve or misbehave: answers out of order, answers that do not fit the policy,
NaN, an endless line, an HTTP port, an info answer without a policy's fields, addresses that are not HOST:PORT. Each
is a one-line UsageError saying what was expected, within a bounded time and memory. The peers are real sockets on
127.0.0.1 port 0, each served by a thread with a bounded number of steps."""

import contextlib
import json
import socket
import threading
import time

import numpy as np
import pytest
from conftest import EXAMPLES, lines_received

import inference as I
from mlagents_inference.fronts.remote import connection as remote_connection

LSTM_INFO = json.loads(json.dumps(I.load(EXAMPLES / "lstm").info))  # one vector input of 10, one branch of 4, memory 32


@contextlib.contextmanager
def peer(answer, info=None):
    """A server on 127.0.0.1 that answers {"info": true} with `info` (LSTM_INFO) and every other group of lines read
    with answer(lines) (bytes to send). Yields its HOST:PORT."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    stop = threading.Event()

    def run():
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            conn.settimeout(0.2)
            for msgs in lines_received(conn, stop, 500):  # bounded: at most 500 reads of 0.2 s
                if msgs and msgs[0].get("info"):
                    conn.sendall(
                        info
                        if isinstance(info, bytes)
                        else json.dumps({"id": None, "info": LSTM_INFO if info is None else info}).encode() + b"\n"
                    )
                elif msgs:
                    out = answer(msgs)
                    for k in range(0, len(out), 1 << 20):  # (an endless line: sent until the client goes)
                        if stop.is_set():
                            break
                        conn.sendall(out[k : k + (1 << 20)])
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1:%d" % listener.getsockname()[1]
    finally:
        stop.set()
        listener.close()
        thread.join(30)


def lines(*answers) -> bytes:
    return b"".join(a if isinstance(a, bytes) else json.dumps(a).encode() + b"\n" for a in answers)


def good(ident, action=1):
    return {"id": ident, "discrete_actions": [action], "memory": [0.0] * 32}


def steps(ids):
    from api_standins import decision_steps

    return decision_steps([np.full((len(ids), 10), 0.1, np.float32)], ids, None)


def test_connect_refuses_answers_out_of_order():
    """Agents [10, 20] answered 20 then 10: the old client handed agent 10 the action of agent 20."""
    with peer(lambda msgs: lines(good(20, 3), good(10, 0))) as where, I.connect(where, timeout=20) as policy:
        with pytest.raises(I.UsageError, match="id 20 where id 10 was expected"):
            policy.get_action(steps([10, 20]))


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"id": None, "discrete_actions": [7, 9], "memory": [1]}, "discrete_actions"),
        ({"id": None, "discrete_actions": [7], "memory": [0.0] * 32}, "outside the branches"),
        ({"id": None, "discrete_actions": [1.5], "memory": [0.0] * 32}, "whole numbers"),
        ({"id": None, "discrete_actions": [True], "memory": [0.0] * 32}, "whole numbers"),
        ({"id": None, "discrete_actions": [1], "memory": ["x"] * 32}, "finite float32 numbers"),
        ({"id": None, "discrete_actions": [1], "memory": [1e300 * 10] * 32}, "finite float32 numbers"),
        ({"id": None, "discrete_actions": [1]}, "keys"),
        ({"id": None, "discrete_actions": [1], "memory": [0.0] * 32, "extra": 1}, "keys"),
        ({"id": None, "discrete_actions": [1], "memory": [0.0] * 32, "model": "Other"}, 'from model "Other"'),
        ({"id": None, "discrete_actions": [1], "memory": [0.0] * 32, "version": 5}, "version 5: expected text"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_connect_refuses_answers_that_do_not_fit_the_policy(bad, says):
    with peer(lambda msgs: json.dumps(bad).encode() + b"\n") as where, I.connect(where, timeout=20) as policy:
        with pytest.raises(I.UsageError, match=says) as info:
            policy.act([0.1] * 10)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("codec", ["orjson or json", "json"])
def test_connect_refuses_nan_in_an_answer_with_either_codec(monkeypatch, codec):
    if codec == "json":
        monkeypatch.setattr(remote_connection, "codec", lambda: (json.loads, lambda obj: json.dumps(obj).encode()))
    nan = b'{"id": null, "discrete_actions": [1], "memory": [NaN' + b", 0.0" * 31 + b"]}\n"
    with peer(lambda msgs: nan) as where, I.connect(where, timeout=20) as policy:
        with pytest.raises(I.UsageError, match="finite float32 numbers|not JSON"):
            policy.act([0.1] * 10)


def test_connect_bounds_an_endless_answer_line():
    """64 MiB of one line: refused once it passes the longest answer this policy can give (the old client joined its
    buffer again on every read and waited for its 60 s timeout)."""
    t0 = time.monotonic()
    with peer(lambda msgs: b"x" * (64 << 20)) as where, I.connect(where) as policy:
        with pytest.raises(I.UsageError, match="answer line longer than"):
            policy.act([0.1] * 10)
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize(
    "info, says",
    [
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "not JSON"),
        ({"behavior": "x"}, "not a serve policy's info"),
        ({**LSTM_INFO, "inputs": [{"name": "obs_0"}]}, "not a serve policy's info"),
        ({**LSTM_INFO, "discrete_branches": [-1]}, "not a serve policy's info"),
        (b'{"id": null, "info": {"x": NaN}}\n', "not JSON|not a serve policy's info"),
        (b"x" * (4 << 20), "answer line longer than"),
    ],
)
def test_connect_to_something_that_is_not_serve_says_what_was_expected(info, says):
    with peer(lambda msgs: b"", info=info) as where:
        with pytest.raises(I.UsageError, match=says) as got:
            I.connect(where, timeout=20)
    assert "\n" not in str(got.value)


@pytest.mark.parametrize(
    "address, says",
    [
        ("127.0.0.1:\u00b2", "whole number from 1 to 65535"),
        ("127.0.0.1:\u0663\u00b9", "whole number from 1 to 65535"),
        ("http://127.0.0.1:8000", "not a URL"),
        ("localhost", "the port serve --listen printed"),
        ("127.0.0.1:0", "whole number from 1 to 65535"),
    ],
)
def test_connect_addresses_that_are_not_host_port_are_one_line(address, says):
    with pytest.raises(I.UsageError, match=says) as got:
        I.connect(address, timeout=5)
    assert "port 0: any free port" not in str(got.value)
