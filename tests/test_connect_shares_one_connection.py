"""The inference.connect() objects of one process that talk to one serve address share ONE connection: serve counts the
connections it accepted (its --stream-stats line at SIGTERM; a stand-in server counts its accepts), and every object
still gets its own answers: two objects' agent ids never meet (each its own LSTM memories, its own reset()), close()
of one leaves the others answering, a forked child shares a connection of its own, one object's time-out gives up its
call alone, and a broken connection fails every object's calls in flight in one line and the next call opens a new
one. Servers listen on 127.0.0.1 port 0; every loop is bounded in count and time."""

import contextlib
import gc
import json
import re
import signal
import socket
import threading

import numpy as np
import pytest
from api_standins import decision_steps, observation
from conftest import BUNDLED, EXAMPLES, forked, lines_received, serve_process

import inference as I

CLOSE = dict(rtol=1e-5, atol=1e-5)  # float32 through JSON and back: within rounding, whatever the machine
LSTM = EXAMPLES / "lstm"  # one vector input of 10, one branch of 4, memory 32


@contextlib.contextmanager
def counted_serve(model):
    """A serve of `model`; yields (its address, a dict that holds, once the block ends and serve has stopped on
    SIGTERM, "connections": how many it accepted, from its --stream-stats line)."""
    proc, address, _ = serve_process("--model-dir", model, "--listen", "127.0.0.1:0", "--stream-stats")
    seen: dict = {}
    try:
        yield address, seen
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        found = re.search(rb"connections=(\d+)", err)
        assert found, err.decode(errors="replace")[-2000:]
        seen["connections"] = int(found.group(1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def lstm_step(remote, local, agents: list, obs: np.ndarray, memory: np.ndarray, where: str) -> np.ndarray:
    """get_action() of `agents` on the remote object, equal to the local policy's act() on the same observations
    with the memories rolled here; the memories after it."""
    got = remote.get_action(decision_steps([obs], agents, None)).discrete
    want = local.act(obs, memory=memory)
    assert np.array_equal(got, want["discrete_actions"]), where
    return want["memory"].copy()


def test_16_threads_each_with_its_own_connect_share_one_connection():
    """Before: 16 connect() objects, 16 sockets (serve counted 16)."""
    local = I.load(BUNDLED)
    obs = [np.random.RandomState(k).randn(3, 59).astype(np.float32) for k in range(16)]
    want = [local.act(o)["continuous_actions"] for o in obs]
    together = threading.Barrier(16, timeout=120)  # (all open before any closes: the last share closes it)
    failures: list = []

    def actor(k: int, address: str) -> None:
        try:
            with I.connect(address, timeout=60) as remote:
                together.wait()
                for step in range(20):
                    got = remote.act(obs[k])["continuous_actions"]
                    np.testing.assert_allclose(got, want[k], **CLOSE, err_msg=f"thread {k} step {step}")
                together.wait()
        except BaseException as exc:  # noqa: BLE001 - every thread's failure is reported by the test
            failures.append(f"thread {k}: {type(exc).__name__}: {str(exc)[:300]}")
            together.abort()

    with counted_serve(BUNDLED) as (address, seen):
        threads = [threading.Thread(target=actor, args=(k, address)) for k in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in threads), "threads still running after 240 s"
    assert failures == [], failures[:3]
    assert seen["connections"] == 1


def test_two_connects_with_the_same_agent_ids_keep_their_own_lstm_memories():
    """Agents 0 and 2 of object a and agents 0 and 2 of object b, on one connection: each object's actions are its own
    local rollout's (its memories only), and a.reset([2]) starts a's agent 2 alone from zeros."""
    local, rng = I.load(LSTM), np.random.RandomState(3)
    size, agents = local.settings.memory_size, [0, 2]
    memory = {who: np.zeros((2, size), np.float32) for who in "ab"}
    stepped = 0  # (rolled memories change the actions: a test that can fail when two objects' memories meet)
    with counted_serve(LSTM) as (address, seen):
        with I.connect(address, timeout=60) as a, I.connect(address, timeout=60) as b:
            for step in range(16):
                for who, remote in (("a", a), ("b", b)):
                    if step == 8 and who == "a":
                        remote.reset([2])
                        memory["a"][1] = 0
                    obs = observation(rng, (10,), 2)
                    fresh = local.act(obs, memory=np.zeros((2, size), np.float32))["discrete_actions"]
                    before = memory[who]
                    memory[who] = lstm_step(remote, local, agents, obs, memory[who], f"{who} step {step}")
                    stepped += int(not np.array_equal(fresh, local.act(obs, memory=before)["discrete_actions"]))
    assert stepped > 0
    assert seen["connections"] == 1


def test_closing_one_connect_leaves_the_others_answering_on_the_shared_connection():
    local, rng = I.load(LSTM), np.random.RandomState(5)
    size = local.settings.memory_size
    with counted_serve(LSTM) as (address, seen):
        a, b, c = (I.connect(address, timeout=60) for _ in range(3))
        memory = np.zeros((1, size), np.float32)
        memory = lstm_step(b, local, [7], observation(rng, (10,), 1), memory, "b before")
        a.close()
        with pytest.raises(I.UsageError, match="connection is closed") as said:
            a.act(observation(rng, (10,), 1))
        assert "\n" not in str(said.value) and "closed" in repr(a)
        for step in range(5):  # (b's memory goes on, c answers)
            memory = lstm_step(b, local, [7], observation(rng, (10,), 1), memory, f"b step {step}")
            obs = observation(rng, (10,), 2)
            got = c.act(obs)["discrete_actions"]
            assert np.array_equal(got, local.act(obs, memory=np.zeros((2, size), np.float32))["discrete_actions"])
        b.close()
        obs = observation(rng, (10,), 1)
        assert np.array_equal(c.act(obs)["discrete_actions"], local.act(obs)["discrete_actions"])
        c.close()
    assert seen["connections"] == 1


def test_two_connects_used_in_a_forked_child_share_a_connection_of_the_childs_own():
    """Objects a and b (the same agent id 1 each, one step made) used in a forked child and in the parent at once: in
    the child each refuses agent 1 in one line until reset() (its memory is the parent connection's), then both are
    exact from zeros; the parent's go on exact. serve saw two connections: the parent's and the child's (before: 4)."""
    local, rng = I.load(LSTM), np.random.RandomState(11)
    size, n = local.settings.memory_size, 30
    first = {who: observation(rng, (10,), 1) for who in "ab"}
    later = {
        who: [observation(rng, (10,), 1) for _ in range(n)] for who in ("parent a", "parent b", "child a", "child b")
    }
    rolled = {who: local.act(first[who], memory=np.zeros((1, size), np.float32))["memory"] for who in "ab"}

    def rollout(start: np.ndarray, steps: list) -> list:
        out, memory = [], start
        for obs in steps:
            want = local.act(obs, memory=memory)
            out.append(want["discrete_actions"].tolist())
            memory = want["memory"]
        return out

    want = {who: rollout(rolled[who[-1]], later[who]) for who in ("parent a", "parent b")}
    want.update({who: rollout(np.zeros((1, size), np.float32), later[who]) for who in ("child a", "child b")})
    with counted_serve(LSTM) as (address, seen):
        a, b = I.connect(address, timeout=60), I.connect(address, timeout=60)
        objects = {"a": a, "b": b}
        for who, remote in objects.items():
            lstm_step(remote, local, [1], first[who], np.zeros((1, size), np.float32), f"{who} first")

        def child() -> dict:
            report = {}
            for who, remote in objects.items():
                try:
                    remote.get_action(decision_steps([later[f"child {who}"][0]], [1], None))
                    report[f"refusal {who}"] = "not refused"
                except I.UsageError as exc:
                    report[f"refusal {who}"] = str(exc)
                remote.reset([1])
            for who, remote in objects.items():
                report[f"child {who}"] = [
                    remote.get_action(decision_steps([obs], [1], None)).discrete.tolist()
                    for obs in later[f"child {who}"]
                ]
            a.close()
            b.close()
            return report

        with forked(child) as said:
            got = {
                f"parent {who}": [
                    remote.get_action(decision_steps([obs], [1], None)).discrete.tolist()
                    for obs in later[f"parent {who}"]
                ]
                for who, remote in objects.items()
            }
        a.close()
        b.close()
    assert said["report"], "the child said nothing"
    got.update(json.loads(said["report"]))
    for who in "ab":
        refusal = got.pop(f"refusal {who}")
        assert "os.fork" in refusal and "\n" not in refusal, refusal
    assert got == want
    assert seen["connections"] == 2


@contextlib.contextmanager
def stand_in(answer_groups, model=EXAMPLES / "vector"):
    """A stand-in serve on 127.0.0.1 for `model`'s policy (examples/vector's unless told), accepting connections
    one after the other (at most 4): it answers {"info": true} lines at once and hands every other line to
    `answer_groups(connection number, lines so far on it)`, which returns the answers to send now (bytes), None to
    wait for more lines, or False to close that connection. Yields (its HOST:PORT, the list of connections accepted,
    an Event set when a client closes one)."""
    info = {"id": None, "info": json.loads(json.dumps(I.load(model).info))}
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop, accepted, ended = threading.Event(), [], threading.Event()

    def run():
        for _ in range(600):  # bounded: at most 600 waits of 0.2 s for a connection
            if stop.is_set() or len(accepted) >= 4:
                break
            try:
                conn, _ = listener.accept()
            except (socket.timeout, OSError):
                continue
            accepted.append(conn)
            conn.settimeout(0.2)
            pending = []
            with contextlib.suppress(OSError):
                for msgs in lines_received(conn, stop, 600, ended):  # bounded: at most 600 reads of 0.2 s
                    for msg in msgs:
                        if msg.get("info"):
                            conn.sendall(json.dumps(info).encode() + b"\n")
                        else:
                            pending.append(msg)
                    out = answer_groups(len(accepted), pending) if pending else None
                    if out is False:
                        break
                    if out:
                        conn.sendall(out)
                        pending = []
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1:%d" % listener.getsockname()[1], accepted, ended
    finally:
        stop.set()
        listener.close()
        thread.join(30)


def vector_answer(msg: dict, value: float) -> bytes:
    return json.dumps({"id": msg.get("id"), "continuous_actions": [value, value], "actions": [value, value]}).encode()


def test_a_broken_shared_connection_fails_every_objects_call_in_one_line_and_the_next_call_opens_a_new_one():
    """The stand-in closes the first connection once both objects' lines are on it: each call ends in one line; the
    next call of each object opens (shares) a second connection, which answers. Before: the objects had a socket each,
    and after a failure every later call said "the connection is closed"."""

    def answer(number: int, pending: list):
        if number == 1:
            return False if len(pending) >= 2 else None
        return b"".join(vector_answer(m, 0.25) + b"\n" for m in pending)

    with stand_in(answer) as (address, accepted, _):
        a, b = I.connect(address, timeout=60), I.connect(address, timeout=60)
        said: list = []

        def call(remote):
            try:
                remote.act(np.zeros(8, np.float32))
                said.append("answered")
            except I.UsageError as exc:
                said.append(str(exc))

        threads = [threading.Thread(target=call, args=(remote,)) for remote in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert len(said) == 2 and all("server closed the connection" in s and "\n" not in s for s in said), said
        for remote in (a, b):
            assert remote.act(np.zeros(8, np.float32))["continuous_actions"].tolist() == [0.25, 0.25]
        a.close()
        b.close()
        assert len(accepted) == 2


def test_one_objects_time_out_gives_up_its_own_call_and_the_others_go_on():
    """Object a (0.5 s) and object b (60 s) on one connection; the stand-in answers nothing until b's line has come,
    then both lines in order: a's call ends in one line ("no answer within 0.5 s"), b gets its own answer (a's, late,
    is dropped) and a's next call is answered on the same connection."""

    def answer(number: int, pending: list):
        if len(pending) == 1 and pending[0].get("id") == 1 and not answer.first_done:
            return None  # (a's first line: held until b's comes)
        answer.first_done = True
        return b"".join(vector_answer(m, 0.5 if k == len(pending) - 1 else -0.5) + b"\n" for k, m in enumerate(pending))

    answer.first_done = False
    with stand_in(answer) as (address, accepted, _):
        a, b = I.connect(address, timeout=0.5), I.connect(address, timeout=60)
        with pytest.raises(I.UsageError, match=r"no answer within 0\.5 s") as said:
            a.act(np.zeros(8, np.float32))
        assert "\n" not in str(said.value)
        assert b.act(np.zeros(8, np.float32))["continuous_actions"].tolist() == [0.5, 0.5]
        assert a.act(np.zeros(8, np.float32))["continuous_actions"].tolist() == [0.5, 0.5]
        a.close()
        b.close()
        assert len(accepted) == 1


def test_the_shared_socket_closes_with_the_last_object_or_when_all_are_garbage_collected():
    """close() of one of two objects leaves the socket open (the other answers on it); the other, dropped without
    close(), closes it when garbage collected."""

    def answer(number: int, pending: list):
        return b"".join(vector_answer(m, 0.75) + b"\n" for m in pending)

    with stand_in(answer) as (address, accepted, ended):
        a, b = I.connect(address, timeout=60), I.connect(address, timeout=60)
        a.close()
        assert b.act(np.zeros(8, np.float32))["continuous_actions"].tolist() == [0.75, 0.75]
        assert not ended.is_set() and len(accepted) == 1
        del a, b
        gc.collect()
        assert ended.wait(30), "the socket stayed open after its last object was collected"


def test_an_lstm_agent_whose_memory_is_unsettled_or_lost_is_refused_until_reset():
    """After its line timed out (the server may have stepped its memory, or not) an agent is refused in one line, and
    after reset() its next line says "reset": true; the others go on. After the connection broke (its memories gone
    with it) the next call opens a new connection, where the agents are refused until reset(). Before: a time-out
    closed the object's connection, and every later call said "the connection is closed"."""
    mode, seen = {"now": "answer"}, []

    def answer(number: int, pending: list):
        if mode["now"] == "hold":
            return None
        if mode["now"] == "close":
            return False
        seen.extend(pending)
        return b"".join(
            json.dumps({"id": m["id"], "discrete_actions": [1], "memory": [0.0] * 32}).encode() + b"\n" for m in pending
        )

    obs = [np.full((n, 10), 0.1, np.float32) for n in (1, 2)]
    with stand_in(answer, LSTM) as (address, accepted, _):
        with I.connect(address, timeout=0.5) as a:
            assert a.get_action(decision_steps([obs[1]], [1, 2], None)).discrete.tolist() == [[1], [1]]
            mode["now"] = "hold"
            with pytest.raises(I.UsageError, match=r"no answer within 0\.5 s"):
                a.get_action(decision_steps([obs[0]], [1], None))
            mode["now"] = "answer"
            assert a.get_action(decision_steps([obs[0]], [2], None)).discrete.tolist() == [[1]]  # (agent 2 goes on)
            with pytest.raises(I.UsageError, match="agent id 1: its LSTM memory is unknown here") as said:
                a.get_action(decision_steps([obs[0]], [1], None))
            assert "\n" not in str(said.value) and "reset()" in str(said.value)
            a.reset([1])
            a.get_action(decision_steps([obs[0]], [1], None))
            assert seen[-1]["id"] == 1 and seen[-1].get("reset") is True
            mode["now"] = "close"
            with pytest.raises(I.UsageError, match="server closed the connection"):
                a.get_action(decision_steps([obs[0]], [2], None))
            mode["now"] = "answer"
            with pytest.raises(I.UsageError, match="agent id 2: its LSTM memory was lost with the connection"):
                a.get_action(decision_steps([obs[0]], [2], None))
            a.reset()
            assert a.get_action(decision_steps([obs[1]], [1, 2], None)).discrete.tolist() == [[1], [1]]
            assert [m["id"] for m in seen[-2:]] == [1, 2]  # (on the new connection: from zeros, held nowhere)
        assert len(accepted) == 2


def test_a_server_error_names_the_agent_id_the_caller_gave_not_its_shared_wire_id():
    """The second object on a connection sends agent 5 as "1:5" on the wire; serve's error text names that wire id
    (here a stand-in's copy of serve's "its memory was dropped" refusal): the object's UsageError names agent 5, as the
    caller gave it, and the first object's errors are as serve wrote them."""

    def answer(number: int, pending: list):
        said = []
        for m in pending:
            shown = json.dumps(m["id"])
            said.append({"id": m["id"], "error": f"id {shown}: its memory was dropped at this client's bound"})
        return b"".join(json.dumps(a).encode() + b"\n" for a in said)

    with stand_in(answer) as (address, accepted, _):
        a, b = I.connect(address, timeout=60), I.connect(address, timeout=60)
        steps = decision_steps([np.zeros((1, 8), np.float32)], [5], None)
        with pytest.raises(I.UsageError) as first:
            a.get_action(steps)
        with pytest.raises(I.UsageError) as second:
            b.get_action(steps)
        a.close()
        b.close()
    assert len(accepted) == 1
    assert str(first.value) == "id 5: its memory was dropped at this client's bound"
    assert str(second.value) == "id 5: its memory was dropped at this client's bound"
