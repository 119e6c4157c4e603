"""One inference.connect() object shared: by 16 threads at once (each its own observations and agent ids, every answer
its own), and by a forked child beside its parent (the child on a connection of its own, or refused in one line). A
real serve process on 127.0.0.1 port 0 answers; the expected actions are inference.load()'s on the same inputs, with
LSTM memories rolled here. Every loop is bounded in count and time."""

import contextlib
import json
import socket
import threading
import time

import numpy as np
import pytest
from api_standins import decision_steps, mlagents_mask, observation, terminal_steps
from conftest import BUNDLED, EXAMPLES, forked, serve_process

import inference as I

THREADS, STEPS = 16, 200
CLOSE = dict(rtol=1e-5, atol=1e-5)  # float32 through JSON and back: within rounding, whatever the machine


@contextlib.contextmanager
def served(model):
    proc, address, _ = serve_process("--model-dir", model, "--listen", "127.0.0.1:0")
    try:
        yield address
    finally:
        proc.kill()
        proc.wait(timeout=30)


def allowed(mask: list) -> np.ndarray:
    """ML-Agents' mask (True = masked, one array per branch) as act()'s (1 = allowed)."""
    return (~np.concatenate(mask, axis=1)).astype(np.float32)


def same_actions(got: dict, want: dict, where: str) -> None:
    for key in ("continuous_actions", "discrete_actions"):
        if key in want and want[key].size:
            a, b = np.asarray(got[key]), np.asarray(want[key])
            assert a.shape == b.shape, (where, key, a.shape, b.shape)
            if key == "discrete_actions":
                assert np.array_equal(a, b), (where, key, a, b)
            else:
                np.testing.assert_allclose(a, b, **CLOSE, err_msg=f"{where} {key}")


def actor(remote, local, k: int, failures: list) -> None:
    """One thread's 200 steps: act() on 1-3 rows of its own observations (masks and memories where the policy has
    them), and get_action() for its own 2 agents (one of them ended now and then, the other reset), each answer compared
    with the local policy's on the same inputs (memories rolled here)."""
    s, rng = local.settings, np.random.RandomState(k)
    agents = [1000 * k + 1, 1000 * k + 2]
    memory = {agent: np.zeros(s.memory_size, np.float32) for agent in agents}
    try:
        for step in range(STEPS):
            rows = 1 + step % 3
            obs = [observation(rng, spec.shape, rows) for spec in s.inputs]
            one = obs[0] if len(obs) == 1 else obs
            masks = None
            if s.discrete_branches:
                masks = (rng.rand(rows, sum(s.discrete_branches)) < 0.7).astype(np.float32)
                start = 0
                for n in s.discrete_branches:  # (at least one action left in each branch)
                    masks[:, start] = 1
                    start += n
            if step % 2 == 0:
                mem = rng.randn(rows, s.memory_size).astype(np.float32) if s.memory_size else None
                same_actions(
                    remote.act(one, action_masks=masks, memory=mem),
                    local.act(one, action_masks=masks, memory=mem),
                    f"thread {k} step {step} act",
                )
                continue
            ended = [agents[0]] if step % 50 == 49 else []
            if step == 121:
                remote.reset([agents[1]])
                memory[agents[1]][:] = 0
            obs = [observation(rng, spec.shape, 2) for spec in s.inputs]  # one row per agent
            mask = mlagents_mask(rng, 2, s.discrete_branches)
            got = remote.get_action(
                decision_steps(obs, agents, mask), terminal_steps([o[: len(ended)] for o in obs], ended)
            )
            for agent in ended:
                memory[agent][:] = 0
            want = local.act(
                obs if len(obs) > 1 else obs[0],
                action_masks=None if mask is None else allowed(mask),
                memory=np.stack([memory[a] for a in agents]) if s.memory_size else None,
            )
            if s.memory_size:
                for j, agent in enumerate(agents):
                    memory[agent] = want["memory"][j].copy()
            same_actions(
                {"continuous_actions": got.continuous, "discrete_actions": got.discrete},
                {key: want[key] for key in ("continuous_actions", "discrete_actions") if key in want},
                f"thread {k} step {step} get_action",
            )
    except BaseException as exc:  # noqa: BLE001 - every thread's failure is reported by the test
        failures.append(f"thread {k}: {type(exc).__name__}: {str(exc)[:300]}")


@pytest.mark.parametrize("model", [BUNDLED, EXAMPLES / "discrete-multi", EXAMPLES / "lstm"], ids=lambda m: m.name)
def test_one_connect_shared_by_16_threads_gives_each_thread_its_own_answers(model):
    """Before: one socket read by every thread, answers taken in whatever order they were read (the issue measured 902
    of 921 answers that were another thread's, then "Bad file descriptor" and time-outs)."""
    local = I.load(model)
    with served(model) as address, I.connect(address, timeout=60) as remote:
        failures: list = []
        threads = [threading.Thread(target=actor, args=(remote, local, k, failures)) for k in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in threads), "threads still running after 240 s"
        assert failures == [], f"{len(failures)} of {THREADS} threads failed: {failures[:3]}"
        zeros = [np.zeros(spec.shape, np.float32) for spec in local.settings.inputs]  # (still one good connection)
        zeros = zeros[0] if len(zeros) == 1 else zeros
        same_actions(remote.act(zeros), local.act(zeros), "after the threads")


def test_a_forked_child_acts_on_a_connection_of_its_own_beside_its_parent():
    """The object made before os.fork, used in the child and the parent at once: both exact. In the child an agent whose
    LSTM memory the parent's connection holds is refused in one line until reset(). Before: parent and child wrote and
    read one socket, each taking the other's answers."""
    model, n = EXAMPLES / "lstm", 150
    local, rng = I.load(model), np.random.RandomState(7)
    size = local.settings.memory_size
    given = {
        who: [(observation(rng, (10,), 1), rng.randn(1, size).astype(np.float32)) for _ in range(n)]
        for who in ("parent", "child")
    }
    want = {who: [local.act(obs, memory=mem)["discrete_actions"] for obs, mem in given[who]] for who in given}
    first, later, alone = observation(rng, (10,), 2), observation(rng, (10,), 2), observation(rng, (10,), 1)
    rolled = local.act(first, memory=np.zeros((2, size), np.float32))
    want_later = local.act(later, memory=rolled["memory"])["discrete_actions"]
    want_alone = local.act(alone, memory=np.zeros((1, size), np.float32))["discrete_actions"]

    def wrong(remote, who) -> int:
        return sum(
            not np.array_equal(remote.act(obs, memory=mem)["discrete_actions"], expected)
            for (obs, mem), expected in zip(given[who], want[who])
        )

    with served(model) as address, I.connect(address, timeout=20) as remote:
        assert np.array_equal(
            remote.get_action(decision_steps([first], [1, 2], None)).discrete, rolled["discrete_actions"]
        )

        def child() -> list:
            try:
                remote.get_action(decision_steps([alone], [1], None))
                refusal = "not refused"
            except I.UsageError as exc:
                refusal = str(exc)
            remote.reset([1])
            after_reset = remote.get_action(decision_steps([alone], [1], None)).discrete.tolist()
            return [refusal, after_reset, wrong(remote, "child")]

        with forked(child) as said:
            parent_wrong = wrong(remote, "parent")
            later_got = remote.get_action(decision_steps([later], [1, 2], None)).discrete
    assert parent_wrong == 0 and np.array_equal(later_got, want_later)
    assert said["report"], "the child said nothing"
    refusal, after_reset, child_wrong = json.loads(said["report"])
    assert "os.fork" in refusal and "\n" not in refusal, refusal
    assert after_reset == want_alone.astype(np.int32).tolist() and child_wrong == 0


def test_close_from_another_thread_ends_every_waiting_call_in_one_line():
    """8 threads wait on a server that takes their lines and never answers; close() from the main thread ends each
    call at once with a one-line UsageError (before: the waiting threads polled a closed descriptor until their
    time-out)."""
    info = json.dumps({"id": None, "info": json.loads(json.dumps(I.load(EXAMPLES / "vector").info))}).encode()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    stop = threading.Event()

    def silent():  # answers {"info": true}, then reads and never answers (bounded: 900 reads of 0.1 s)
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            conn.settimeout(0.1)
            conn.recv(1 << 16)
            conn.sendall(info + b"\n")
            for _ in range(900):
                if stop.is_set():
                    break
                with contextlib.suppress(socket.timeout):
                    if not conn.recv(1 << 16):
                        break
            conn.close()

    server = threading.Thread(target=silent, daemon=True)
    server.start()
    said: list = []
    try:
        remote = I.connect("127.0.0.1:%d" % listener.getsockname()[1], timeout=60)

        def call():
            try:
                remote.act(np.zeros(8, np.float32))
                said.append("answered")
            except I.UsageError as exc:
                said.append(str(exc))

        threads = [threading.Thread(target=call) for _ in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # (they are waiting: nothing answers)
        t0 = time.monotonic()
        remote.close()
        for thread in threads:
            thread.join(timeout=90)
        took = time.monotonic() - t0
    finally:
        stop.set()
        listener.close()
        server.join(30)
    assert len(said) == 8 and took < 30, (said, took)  # (well within the 60 s time-out: a bound, not a speed)
    assert all("connection is closed" in text and "\n" not in text for text in said), said
    with pytest.raises(I.UsageError, match="connection is closed"):
        remote.act(np.zeros(8, np.float32))
