"""serve's LSTM memory bounds are the server's, whatever number of model versions it holds (issue 44): one client's ids
in every version together are bounded by one client bound, and the whole bound counts every version's memories; an
unloaded version gives its room back; each version keeps memories of its own. Served here: examples/lstm's run folder
with --versions 2 (Memory 50000 and 100000 both loaded), small bounds patched in; the servers run in this process
(fronts.serve.serving) on 127.0.0.1 port 0; every loop is bounded. The true answers are each checkpoint loaded on its
own (inference.load(<checkpoint>).act()), a reference this code does not compute."""

import contextlib
import http.client
import json

import numpy as np
import pytest
from conftest import EXAMPLES, copy_run, dial, exchange

import inference as I
from mlagents_inference.fronts.serve import serving
from mlagents_inference.services import batcher
from mlagents_inference.services.batcher import ServeOptions
from mlagents_inference.services.repository import Repository

OLD, NEW = "50000", "100000"
TOL = 1e-5
STEPS = np.random.RandomState(44).uniform(-1, 1, (16, 3, 10)).astype(np.float32)  # (agent, step, obs)
DROPPED = "its memory was dropped at this client's bound of {} ids"
WHOLE = "the server holds its most LSTM memories ({} ids"


@pytest.fixture(scope="module")
def checkpoints() -> dict:
    return {v: I.load(EXAMPLES / "lstm" / "Memory" / f"Memory-{v}.pt") for v in (OLD, NEW)}


@contextlib.contextmanager
def two_versions(tmp_path, monkeypatch, client_ids: int, whole_ids: int):
    """A server of examples/lstm's Memory with both checkpoints loaded (--versions 2; 100000 serving), each client
    bounded to `client_ids` memories and the server to `whole_ids`: (its addresses, its repository)."""
    monkeypatch.setattr(batcher, "CONNECTION_MEMORY_IDS", client_ids)
    monkeypatch.setattr(batcher, "MEMORY_IDS", whole_ids)
    repo = Repository([copy_run(EXAMPLES / "lstm", tmp_path)], versions=2)
    repo.poll()
    with serving(None, ServeOptions(), repo, listen="127.0.0.1:0") as said:
        yield said, repo


def line(agent: int, t: int, version=None, **extra) -> dict:
    named = {"version": version} if version is not None else {}
    return {"id": agent, "model": "Memory", "obs": STEPS[agent, t].tolist(), **named, **extra}


def rollout(policy, agent: int, steps: int) -> list:
    """One agent's true answers (its memory carried from step to step, from zeros)."""
    memory, out = None, []
    for t in range(steps):
        got = policy.act(STEPS[agent, t][None], memory=memory)
        memory = got["memory"]
        out.append((got["discrete_actions"][0].tolist(), memory[0]))
    return out


def assert_true_step(answer: dict, version: str, want: tuple) -> None:
    assert "error" not in answer and answer["version"] == version, answer
    assert answer["discrete_actions"] == want[0], answer
    assert np.abs(np.asarray(answer["memory"]) - want[1]).max() <= TOL


def test_one_clients_ids_on_two_versions_are_bounded_by_one_client_bound(tmp_path, monkeypatch, checkpoints):
    """A client's bound of 10 ids: agents 0-5 on 50000 and 6-9 on 100000 fill it; agent 12 on each version (two
    agents, each on its own version's memories) drops the client's two least recently answered, agents 0 and 1 on
    50000 (each version had a bound of its own: none was dropped). Their next lines are refused in the one line of a
    client's bound, agent 1's naming no version too (not started again from zeros on 100000, the version serving);
    the others go on, each equal to its own checkpoint's rollout."""
    with two_versions(tmp_path, monkeypatch, client_ids=10, whole_ids=1000) as (said, _), dial(said["listen"]) as sock:
        first = exchange(sock, [line(a, 0, OLD if a < 6 else NEW) for a in range(10)])
        both = [exchange(sock, [line(12, t, OLD)])[0] for t in range(2)]
        both += [exchange(sock, [line(12, t, NEW)])[0] for t in range(2)]
        dropped = exchange(sock, [line(0, 1, OLD), line(1, 1)])
        kept = exchange(sock, [line(a, 1, OLD if a < 6 else NEW) for a in (2, 5, 6, 9)])
        again = exchange(sock, [line(0, 0, OLD, reset=True)])[0]
    for a, answer in enumerate(first):
        version = OLD if a < 6 else NEW
        assert_true_step(answer, version, rollout(checkpoints[version], a, 1)[0])
    for t, answer in enumerate(both):
        version = OLD if t < 2 else NEW
        assert_true_step(answer, version, rollout(checkpoints[version], 12, 2)[t % 2])
    for agent, answer in zip((0, 1), dropped):
        assert set(answer) == {"id", "error", "model", "version"} and answer["version"] == OLD, answer
        assert answer["error"].startswith(f"id {agent}: " + DROPPED.format(10)), answer
        assert answer["error"].endswith('send "reset": true to start it from zeros, or its "memory"'), answer
    for agent, answer in zip((2, 5, 6, 9), kept):
        version = OLD if agent < 6 else NEW
        assert_true_step(answer, version, rollout(checkpoints[version], agent, 2)[1])
    assert_true_step(again, OLD, rollout(checkpoints[OLD], 0, 1)[0])


def test_the_servers_whole_bound_counts_every_versions_memories(tmp_path, monkeypatch, checkpoints):
    """A whole bound of 10 ids: client A holds 6 on 50000; client B's new ids on 100000 fit until the two versions
    hold 10 together, the rest refused (each version had a bound of its own: 12 fitted). A's memories are kept."""
    with (
        two_versions(tmp_path, monkeypatch, client_ids=100, whole_ids=10) as (said, _),
        dial(said["listen"]) as a,
        dial(said["listen"]) as b,
    ):
        exchange(a, [line(k, 0, OLD) for k in range(6)])
        flood = exchange(b, [line(k, 0, NEW) for k in range(6)])
        mine = exchange(a, [line(k, 1, OLD) for k in range(6)])
    assert [answer["id"] for answer in flood if "error" in answer] == [4, 5]
    assert all(WHOLE.format(10) in answer["error"] for answer in flood[4:]), flood[4:]
    for k, answer in enumerate(flood[:4]):
        assert_true_step(answer, NEW, rollout(checkpoints[NEW], k, 1)[0])
    for k, answer in enumerate(mine):
        assert_true_step(answer, OLD, rollout(checkpoints[OLD], k, 2)[1])


def test_an_unloaded_versions_memories_are_given_back(tmp_path, monkeypatch, checkpoints):
    """The two versions hold the whole bound of 10 ids together: a new id is refused; once 50000 is unloaded its 8
    memories are given back, and new ids fit again (its agents are refused once, as ever, never moved)."""
    with (
        two_versions(tmp_path, monkeypatch, client_ids=100, whole_ids=10) as (said, repo),
        dial(said["listen"]) as a,
        dial(said["listen"]) as b,
    ):
        exchange(a, [line(k, 0, OLD) for k in range(8)])
        exchange(b, [line(k, 0, NEW) for k in range(2)])
        full = exchange(b, [line(2, 0, NEW)])[0]
        repo.unload("Memory", int(OLD))
        fits = exchange(b, [line(k, 0, NEW) for k in range(2, 10)])
        gone = exchange(a, [line(0, 1)])[0]
    assert WHOLE.format(10) in full["error"], full
    for k, answer in zip(range(2, 10), fits):
        assert_true_step(answer, NEW, rollout(checkpoints[NEW], k, 1)[0])
    assert "its version 50000 of Memory was unloaded" in gone["error"], gone


def test_a_v2_clients_sequences_on_two_versions_are_bounded_by_one_client_bound(tmp_path, monkeypatch, checkpoints):
    """V2 REST, one client (a host) with a bound of 4 sequences: 1 and 2 started on 50000, 3 and 4 on 100000 (each
    named by /versions/{v}); sequence 5 on 100000 drops the least recently answered, 1 on 50000 (each version had a
    bound of its own: none was dropped), whose next request is refused in V2's words; 2 goes on, equal to 50000's
    rollout."""
    pytest.importorskip("aiohttp")

    def infer(where: str, version: str, sequence: int, t: int, start: bool = False) -> tuple:
        body = {
            "parameters": {"sequence_id": sequence, "sequence_start": start},
            "inputs": [{"name": "obs_0", "datatype": "FP32", "shape": [1, 10], "data": STEPS[sequence, t].tolist()}],
        }
        host, port = where.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            conn.request("POST", f"/v2/models/Memory/versions/{version}/infer", body=json.dumps(body).encode())
            answer = conn.getresponse()
            return answer.status, json.loads(answer.read())
        finally:
            conn.close()

    monkeypatch.setattr(batcher, "CONNECTION_MEMORY_IDS", 4)
    repo = Repository([copy_run(EXAMPLES / "lstm", tmp_path)], versions=2)
    repo.poll()
    with serving(None, ServeOptions(), repo, http="127.0.0.1:0") as said:
        where = said["http"]
        started = [infer(where, OLD if s < 3 else NEW, s, 0, start=True) for s in (1, 2, 3, 4, 5)]
        dropped = infer(where, OLD, 1, 1)
        kept = infer(where, OLD, 2, 1)
    assert [status for status, _ in started] == [200] * 5, started
    assert dropped[0] == 400, dropped
    assert dropped[1]["error"].startswith("sequence 1: its memory was dropped at this client's bound of 4 sequences")
    status, answer = kept
    out = next(o for o in answer["outputs"] if o["name"] == "recurrent_out")
    assert status == 200 and answer["model_version"] == OLD
    assert np.abs(np.asarray(out["data"]) - rollout(checkpoints[OLD], 2, 2)[1][1]).max() <= TOL


def test_memories_sharing_a_budget_never_pass_its_bounds_and_give_all_their_room_back():
    """Three memories (three lanes) share one budget of 12 ids, 5 a scope; 2,000 random keeps, forgets and re-keeps
    over 4 scopes: at every step the ids held in all three together stay within the whole bound and each scope's
    within its own, and the budget's counts equal what the three hold. Once one is released and the scopes forgotten,
    the budget holds nothing (no room lost)."""
    from mlagents_inference.core.errors import UsageError
    from mlagents_inference.core.observations import AgentMemories, MemoryBudget

    budget = MemoryBudget(max_ids=12, max_bytes=1 << 30, scope_ids=5, scope_bytes=1 << 30)
    lanes = [AgentMemories(budget=budget) for _ in range(3)]
    rng = np.random.RandomState(7)
    for _ in range(2000):
        lane, scope = lanes[rng.randint(3)], f"{rng.randint(4)}:"
        key = scope + str(rng.randint(6))
        if rng.rand() < 0.15:
            lane.forget(key)
        else:
            with contextlib.suppress(UsageError):
                lane.keep(key, np.zeros((1, 2 + 2 * rng.randint(2)), np.float32), scope)
        held = [k for m in lanes for k in m]
        assert len(held) <= 12 and budget.ids == len(held)
        for s in range(4):
            assert sum(k.startswith(f"{s}:") for k in held) <= 5
        assert budget.nbytes == sum(m.nbytes for m in lanes) and all(k in m.where for m in lanes for k in m)
    lanes[0].release()
    assert budget.ids == sum(map(len, lanes[1:])) and lanes[0] == {}
    lanes[0].keep("0:x", np.zeros((1, 2), np.float32), "0:")  # (counted in a budget of its own now)
    assert budget.ids == sum(map(len, lanes[1:]))
    for s in range(4):
        for m in lanes[1:]:
            m.forget_scope(f"{s}:")
    assert (budget.ids, budget.nbytes, budget.scopes) == (0, 0, {})
