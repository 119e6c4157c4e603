"""inference.connect(model=..., version=...) against a serve of two behaviours of one run folder: every line names the
model (and the version, where one is asked for), each answer equals inference.load(<that checkpoint>).act() and says
which model and version answered; a connect() that names no model where several are served is one line; one such
object shared by threads, and used in a forked child, keeps answering from its own model."""

import json
import threading

import numpy as np
import pytest
from api_standins import decision_steps
from conftest import forked, serve_process, two_behaviour_run

import inference as I

TOL = 1e-5  # float32 through JSON and back: within rounding, whatever the machine


def vector_obs(rows: int, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).uniform(-1, 1, (rows, 8)).astype(np.float32)


def hybrid_obs(rows: int, seed: int) -> np.ndarray:
    return np.random.RandomState(seed).uniform(-1, 1, (rows, 12)).astype(np.float32)


def same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    assert np.abs(got["continuous_actions"] - want["continuous_actions"]).max() <= TOL
    if "discrete_actions" in want:
        assert np.array_equal(got["discrete_actions"], want["discrete_actions"])


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """(the run folder, the address of a serve of it keeping 2 versions: Vector's 50000 and 100000, Hybrid's 40000)"""
    run = two_behaviour_run(tmp_path_factory.mktemp("connect-models"))
    proc, address, _ = serve_process("--model-dir", run, "--versions", 2, "--listen", "127.0.0.1:0")
    try:
        yield run, address
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_each_connect_names_its_model_and_gets_that_checkpoints_answers(two):
    run, address = two
    vo, ho = vector_obs(5, 1), hybrid_obs(5, 2)
    want_v = I.load(run / "Vector" / "Vector-100000.pt").act(vo)  # (the newest of each: what serves)
    want_h = I.load(run / "Hybrid" / "Hybrid-40000.pt").act(ho)
    with I.connect(address, model="Vector") as vector, I.connect(address, model="Hybrid") as hybrid:
        assert (vector.model, vector.version, hybrid.model, hybrid.version) == ("Vector", "100000", "Hybrid", "40000")
        assert vector.info["behavior"] == "Vector" and hybrid.info["behavior"] == "Hybrid"
        got_v, got_h = vector.act(vo), hybrid.act(ho)
        same(got_v, want_v)
        same(got_h, want_h)
        assert isinstance(got_v, dict) and (got_v.model, got_v.version) == ("Vector", "100000")
        assert (got_h.model, got_h.version) == ("Hybrid", "40000")
        one = vector.act(vo[0])  # (unbatched: the same shape as load()'s)
        assert one["continuous_actions"].shape == want_v["continuous_actions"][0].shape
        actions = hybrid.get_action(decision_steps([ho], [3, 4, 5, 6, 7], None))
        assert np.abs(actions.continuous - want_h["continuous_actions"]).max() <= TOL
        assert np.array_equal(actions.discrete, want_h["discrete_actions"])
        assert hybrid.versions == {agent: "40000" for agent in (3, 4, 5, 6, 7)} and hybrid.version == "40000"
        assert "Hybrid" in repr(hybrid) and "40000" in repr(hybrid)


def test_a_connect_names_a_loaded_version(two):
    run, address = two
    vo = vector_obs(4, 3)
    want_old = I.load(run / "Vector" / "Vector-50000.pt").act(vo)
    want_new = I.load(run / "Vector" / "Vector-100000.pt").act(vo)
    assert np.abs(want_old["continuous_actions"] - want_new["continuous_actions"]).max() > 100 * TOL  # (two policies)
    with (
        I.connect(address, model="Vector", version=50000) as old,
        I.connect(address, model="Vector", version="100000") as new,
    ):
        got_old, got_new = old.act(vo), new.act(vo)
    same(got_old, want_old)
    same(got_new, want_new)
    assert (got_old.version, got_new.version, old.version) == ("50000", "100000", "50000")


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({}, ["name the model: 2 are served (Hybrid, Vector)", "model=NAME"]),
        ({"model": "Keeper"}, ["model Keeper: not served (served: Hybrid, Vector)"]),
        ({"model": "Vector", "version": 70000}, ["version 70000 is not loaded (loaded: 50000, 100000)"]),
        ({"model": 7}, ["model=7: expected a served model's name"]),
        ({"model": "Vector", "version": -1}, ["version=-1: expected a loaded version"]),
    ],
    ids=["no-model", "unknown-model", "unloaded-version", "model-not-text", "negative-version"],
)
def test_a_connect_the_server_cannot_answer_is_one_line(two, kwargs, says):
    _, address = two
    with pytest.raises(I.UsageError) as caught:
        I.connect(address, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and all(part in message for part in says), message


def test_a_connect_shared_by_threads_and_used_in_a_forked_child_keeps_to_its_model(two):
    """8 threads on one connect(model="Hybrid") while a forked child acts on the same object (on a connection of its
    own): every answer Hybrid's, equal to its checkpoint's."""
    run, address = two
    ho = [hybrid_obs(3, 10 + k) for k in range(8)]
    local = I.load(run / "Hybrid" / "Hybrid-40000.pt")
    want = [local.act(obs) for obs in ho]
    failures: list = []
    with I.connect(address, timeout=30, model="Hybrid") as hybrid:

        def child() -> int:
            wrong = 0
            for k in range(8):
                got = hybrid.act(ho[k])
                wrong += got.model != "Hybrid" or got.version != "40000"
                wrong += not np.array_equal(got["discrete_actions"], want[k]["discrete_actions"])
                wrong += not np.abs(got["continuous_actions"] - want[k]["continuous_actions"]).max() <= TOL
            return wrong

        def actor(k: int) -> None:
            try:
                for _ in range(20):
                    got = hybrid.act(ho[k])
                    same(got, want[k])
                    assert (got.model, got.version, hybrid.version) == ("Hybrid", "40000", "40000")
            except Exception as exc:  # noqa: BLE001 - reported below, whichever it is
                failures.append(f"thread {k}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=actor, args=(k,), daemon=True) for k in range(8)]
        with forked(child) as said:
            for thread in threads:
                thread.start()
        for thread in threads:
            thread.join(120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == [], failures[:3]
    assert said["report"] and json.loads(said["report"]) == 0
