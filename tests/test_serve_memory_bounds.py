"""serve's LSTM memories are bounded per client (each connection; all of POST /v1/act together) and for the server as a
whole: no client can drop another's memory; a memory dropped at its own client's bound is never dropped silently (its
id's next line is refused unless it says "reset": true or carries its "memory"); past the whole's bound a new id is
refused. The stream keeps the same rule for its one client. Servers run in this process (fronts.serve.serving) on
127.0.0.1 port 0; every loop is bounded."""

import json
import socket

import numpy as np
import pytest
from conftest import EXAMPLES

import inference as I
from mlagents_inference.core.observations import AgentMemories
from mlagents_inference.fronts import serve
from mlagents_inference.services import batcher
from mlagents_inference.services.protocol import stream_answer

LSTM = EXAMPLES / "lstm"
OBS = [[0.1 * k for k in range(10)], [0.5] * 10, [-0.3] * 10, [0.2, -0.1] * 5]


@pytest.fixture(scope="module")
def lstm_policy():
    return I.load(LSTM)


def rollout(policy, steps: list) -> list:
    """The true answers of one agent's lines (its memory carried from one to the next)."""
    memory, out = None, []
    for obs in steps:
        got = policy.act(obs, memory=memory)
        memory = got["memory"]
        out.append(got)
    return out


def dial(where: str) -> socket.socket:
    host, port = where.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=120)


def exchange(sock: socket.socket, lines: list) -> list:
    sock.sendall(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    buf, out = b"", []
    while len(out) < len(lines):
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {len(out)} of {len(lines)} answers"
        *complete, buf = (buf + chunk).split(b"\n")
        out += [json.loads(line) for line in complete]
    return out


def start(policy, monkeypatch, ids: int, whole: int = 100_000):
    monkeypatch.setattr(batcher, "CONNECTION_MEMORY_IDS", ids)
    monkeypatch.setattr(batcher, "MEMORY_IDS", whole)
    return serve.serving(policy, listen="127.0.0.1:0")


def test_a_client_flooding_ids_cannot_drop_another_clients_memory(lstm_policy, monkeypatch):
    """The issue's case, on the server's own bounds: connection A answers id 5 three times; B sends 100,500 distinct
    ids; A's next line for id 5 is still the true rollout (the old server dropped it: computed from zeros, 1.18 off,
    with no error)."""
    truth = rollout(lstm_policy, OBS)
    with serve.serving(lstm_policy, listen="127.0.0.1:0") as said, dial(said["listen"]) as a, dial(said["listen"]) as b:
        first = exchange(a, [{"obs": obs, "id": 5} for obs in OBS[:3]])
        flood = [
            answer
            for start in range(0, 100_500, 4500)  # (in parts: the server reads no more than it can send)
            for answer in exchange(b, [{"obs": OBS[0], "id": k} for k in range(start, min(start + 4500, 100_500))])
        ]
        last = exchange(a, [{"obs": OBS[3], "id": 5}])[0]
    assert all("error" not in answer for answer in flood)
    for got, want in zip(first + [last], truth):
        assert "error" not in got, got
        assert np.abs(np.array(got["memory"]) - want["memory"]).max() < 1e-5
        assert got["discrete_actions"] == want["discrete_actions"].tolist()


def test_a_memory_dropped_at_its_own_connections_bound_is_refused_not_zeroed(lstm_policy, monkeypatch):
    with start(lstm_policy, monkeypatch, ids=100) as said, dial(said["listen"]) as b:
        bounds = exchange(b, [{"info": True}])[0]["bounds"]
        exchange(b, [{"obs": OBS[0], "id": k} for k in range(150)])  # ids 0..49 dropped at the bound of 100
        again, reset = exchange(b, [{"obs": OBS[1], "id": 0}, {"obs": OBS[1], "id": 1, "reset": True}])
        carried = exchange(b, [{"obs": OBS[1], "id": 2, "memory": [0.0] * 32}])[0]
        still = exchange(b, [{"obs": OBS[1], "id": 0}])[0]
    assert bounds["memory_ids_per_connection"] == 100 and bounds["memory_ids"] == 100_000
    assert again["id"] == 0 and "bound of 100 ids" in again["error"] and '"reset": true' in again["error"]
    assert "error" not in reset and "error" not in carried
    assert "error" in still  # (refused until it says reset or carries its memory)


def test_the_servers_bound_refuses_new_ids_and_keeps_every_clients_memory(lstm_policy, monkeypatch):
    truth = rollout(lstm_policy, OBS[:2])
    with (
        start(lstm_policy, monkeypatch, ids=40, whole=50) as said,
        dial(said["listen"]) as a,
        dial(said["listen"]) as b,
    ):
        exchange(a, [{"obs": OBS[0], "id": 5}])
        flood = exchange(b, [{"obs": OBS[0], "id": k} for k in range(60)])
        mine = exchange(a, [{"obs": OBS[1], "id": 5}])[0]
        refused_a = exchange(a, [{"obs": OBS[1], "id": 6}])[0]
    assert all("error" not in answer for answer in flood)  # B's own bound (40): its oldest dropped, none refused
    assert "error" not in mine and np.abs(np.array(mine["memory"]) - truth[1]["memory"]).max() < 1e-5
    with (
        start(lstm_policy, monkeypatch, ids=30, whole=50) as said,
        dial(said["listen"]) as a,
        dial(said["listen"]) as b,
    ):
        exchange(a, [{"obs": OBS[0], "id": k} for k in range(30)])
        flood = exchange(b, [{"obs": OBS[0], "id": k} for k in range(30)])
        kept = exchange(a, [{"obs": OBS[1], "id": 0}])[0]
    assert [answer["id"] for answer in flood if "error" in answer] == list(range(20, 30))
    assert "most LSTM memories" in flood[-1]["error"] and "error" not in kept
    assert "error" not in refused_a  # (40 + 1 < 50: room)


def test_the_stream_keeps_the_same_rule_for_its_one_client(lstm_policy):
    memories = AgentMemories(max_ids=3)
    for ident in ["a", "b", "c", "d"]:
        stream_answer(lstm_policy, {"obs": OBS[0], "id": ident}, memories)
    with pytest.raises(I.UsageError, match='bound of 3 ids.*"reset": true'):
        stream_answer(lstm_policy, {"obs": OBS[1], "id": "a"}, memories)
    assert "memory" in stream_answer(lstm_policy, {"obs": OBS[1], "id": "a", "reset": True}, memories)
