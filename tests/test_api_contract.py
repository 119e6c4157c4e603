"""The policy API's one contract (mlagents_inference.api.contract.PolicyAPI): inference.load()'s Policy and
inference.connect()'s RemotePolicy have its methods with its arguments, and refuse the same bad arguments with the
same one-line message (one set of checks, one range of seeds)."""

import inspect

import numpy as np
import pytest
from conftest import EXAMPLES

import inference as I
from mlagents_inference.api.contract import SEED_END, SEED_MIN, PolicyAPI
from mlagents_inference.api.policy import Policy
from mlagents_inference.fronts.remote import RemotePolicy
from mlagents_inference.fronts.serve import serving
from mlagents_inference.services.batcher import ServeOptions

CONTRACT = [name for name, _ in inspect.getmembers(PolicyAPI) if not name.startswith("_")]


def test_the_contract_names_the_api():
    assert sorted(CONTRACT) == ["act", "check_spec", "close", "get_action", "info", "reset"]


@pytest.mark.parametrize("cls", [Policy, RemotePolicy])
def test_both_policies_take_the_contracts_arguments_in_its_order(cls):
    for name in CONTRACT:
        theirs = getattr(PolicyAPI, name)
        if isinstance(theirs, property):
            continue  # (info: a property of Policy, an attribute RemotePolicy reads once at connect())
        mine = getattr(cls, name)
        want = list(inspect.signature(theirs).parameters.values())
        have = list(inspect.signature(mine).parameters.values())[: len(want)]
        assert [(p.name, p.default) for p in have] == [(p.name, p.default) for p in want], (cls.__name__, name)


@pytest.fixture(scope="module")
def pair():
    """The same hybrid policy (continuous and discrete actions) in this process and over a serve connection."""
    local = I.load(EXAMPLES / "hybrid", spin=False)
    with serving(local, ServeOptions(), listen="127.0.0.1:0") as said, I.connect(said["listen"]) as remote:
        yield local, remote


def test_info_describes_the_same_policy(pair):
    local, remote = pair
    for key in ("inputs", "continuous_size", "discrete_branches", "memory_size", "behavior"):
        assert remote.info[key] == local.info[key], key


SEEDS_OUT_OF_RANGE = [SEED_MIN - 1, SEED_END, 1.5, True, "3", np.float64(2.0)]


@pytest.mark.parametrize("seed", SEEDS_OUT_OF_RANGE, ids=repr)
def test_a_seed_is_refused_alike_by_both(pair, seed):
    local, remote = pair
    obs = np.zeros(local.settings.inputs[0].shape, np.float32)
    messages = []
    for policy in (local, remote):
        with pytest.raises(I.UsageError) as caught:
            policy.act(obs, deterministic=False, seed=seed)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "\n" not in messages[0]


@pytest.mark.parametrize("seed", [SEED_MIN, -1, 0, 2**63, SEED_END - 1])
def test_a_seed_in_range_samples_the_same_actions_on_both(pair, seed):
    local, remote = pair
    rng = np.random.RandomState(3)
    obs = rng.randn(*local.settings.inputs[0].shape).astype(np.float32)
    mine, theirs = local.act(obs, deterministic=False, seed=seed), remote.act(obs, deterministic=False, seed=seed)
    assert set(mine) == set(theirs)
    for key in mine:
        assert np.allclose(mine[key], theirs[key], atol=1e-6), key


@pytest.mark.parametrize(
    "call",
    [
        lambda p, obs: p.act(obs, deterministic="yes"),
        lambda p, obs: p.act(obs, memory=np.zeros(3, np.float32)),
        lambda p, obs: p.act(obs, action_masks=np.ones(99, np.float32)),
        lambda p, obs: p.act([obs, obs]),
        lambda p, obs: p.reset(agent_ids=["a"]),
        lambda p, obs: p.check_spec(object()),
        lambda p, obs: p.get_action(object()),
    ],
    ids=["deterministic", "memory", "masks", "inputs", "reset", "check_spec", "get_action"],
)
def test_bad_arguments_get_the_same_line_from_both(pair, call):
    local, remote = pair
    obs = np.zeros(local.settings.inputs[0].shape, np.float32)
    messages = []
    for policy in (local, remote):
        with pytest.raises(I.UsageError) as caught:
            call(policy, obs)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "\n" not in messages[0]


@pytest.mark.parametrize(
    "arguments, words",
    [
        ({"path": EXAMPLES / "vectr"}, ["path ", "no such file"]),
        ({"path": EXAMPLES / "vector", "device": "gpu"}, ["device 'gpu'"]),
        ({"path": EXAMPLES / "vector", "device": "cuda:3"}, ["device cuda:3"]),
        ({"path": EXAMPLES / "vector", "engine": "onnxruntime", "dtype": "float16"}, ["use engine torch"]),
        ({"path": EXAMPLES / "vector", "providers": ["tensorrt"]}, ["providers applies to engine"]),
        ({"path": EXAMPLES}, ['pass path="FILE.pt"']),
    ],
)
def test_load_refuses_in_its_arguments_names_not_the_command_lines(arguments, words):
    with pytest.raises(I.UsageError) as refusal:
        I.load(**arguments)
    text = str(refusal.value)
    assert "--" not in text, text
    for word in words:
        assert word in text, (word, text)


def test_load_keeps_the_class_of_what_it_raises():
    with pytest.raises(I.NotThisPolicy, match="not this policy"):
        I.load(EXAMPLES / "vector", onnx=EXAMPLES / "hybrid" / "Hybrid.onnx")
