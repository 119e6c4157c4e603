"""The Python API as real clients drive it (issue 18): mlagents_envs' DecisionSteps / TerminalSteps /
BehaviorSpec / ActionTuple (the real classes when mlagents_envs is installed, else stand-ins with the
same attributes: tests/api_standins.py), gymnasium-style masks, sampling noise, camera frames as
uint8, and another policy's --onnx; the arguments of load() and act() (a wrong one is a UsageError, a
tensor is taken as an array). References: a bare onnxruntime session on the example's own ML-Agents ONNX
(tests/mlagents_reference.py), never inference.py itself."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch
from api_standins import (
    REAL_MLAGENTS,
    ActionTuple,
    BehaviorSpec,
    DecisionSteps,
    StandInUnityEnvironment,
    behavior_spec,
    decision_steps,
    mlagents_mask,
    observation,
    terminal_steps,
)
from conftest import BUNDLED, EXAMPLES, call, ort_deterministic
from mlagents_reference import OnnxReference, discrete_mismatches, max_rel_err

import inference as I
from mlagents_inference.core.observations import AgentMemories

TOL = 1e-5


def example(name: str):
    folder = EXAMPLES / name
    behavior = json.loads((folder / "generated.json").read_text())["behavior"]
    return folder, OnnxReference(folder / f"{behavior}.onnx")


def allowed(mask) -> np.ndarray:
    """ML-Agents' per-branch mask (True = masked) as the ONNX's action_masks input (1 = allowed)."""
    return (~np.concatenate(mask, axis=1)).astype(np.float32)


def masked_chosen(actions: np.ndarray, mask) -> int:
    rows = np.arange(len(actions))
    return sum(int(branch[rows, actions[:, b]].sum()) for b, branch in enumerate(mask))


# ---------------------------------------------------------------------------------------------
# get_action over rollouts where agents come, go and end
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["lstm", "lstm-camera-nonsquare", "hybrid", "discrete-multi", "sac-continuous", "attention"]
)
def test_get_action_over_a_rollout_matches_the_mlagents_onnx(name):
    """Each step: the ids in TerminalSteps end (the ONNX side drops their memory), the ids in
    DecisionSteps act (new ids from zeros; one may end and start again in the same step). The
    policy keeps the memories itself; the ONNX carries its own per id."""
    folder, reference = example(name)
    policy = I.load(folder)
    env = StandInUnityEnvironment.__new__(StandInUnityEnvironment)
    StandInUnityEnvironment.example = folder
    env.__init__(seed=11)
    env.reset()
    spec = behavior_spec(folder)
    assert policy.check_spec(spec) is None
    memory_size = reference.memory_size if reference.recurrent else 0
    theirs: dict = {}
    worst = {"continuous": 0.0, "memory": 0.0}
    agents_seen, empty_steps = set(), 0
    for step in range(40):
        decisions, terminals = env.get_steps(env.name)
        for agent in terminals.agent_id.tolist():
            theirs.pop(agent, None)
        action = policy.get_action(decisions, terminals)
        env.set_actions(env.name, action)  # checks shapes, dtypes (ActionTuple's) and masks
        env.step()
        ids = decisions.agent_id.tolist()
        agents_seen.update(ids)
        if not ids:
            empty_steps += 1
            continue
        masks = allowed(decisions.action_mask) if decisions.action_mask is not None else None
        memory = np.stack([theirs.get(a, np.zeros(memory_size, np.float32)) for a in ids]) if memory_size else None
        ref = reference.run(decisions.obs, masks, memory)
        if "continuous" in ref:
            worst["continuous"] = max(worst["continuous"], max_rel_err(action.continuous, ref["continuous"]))
        if "discrete" in ref:
            genuine, ties, examples = discrete_mismatches(action.discrete, ref, 1e-5)
            assert genuine == 0, (name, step, examples)
        if memory_size:
            ours = np.stack([policy.memories[a] for a in ids])
            worst["memory"] = max(worst["memory"], max_rel_err(ours, ref["memory"]))
            theirs.update(zip(ids, ref["memory"]))
    assert worst["continuous"] <= TOL and worst["memory"] <= TOL, (name, worst)
    assert env.log["masked_chosen"] == 0
    assert env.log["terminals"] > 3 and len(agents_seen) > 6 and empty_steps >= 5, env.log  # it did what it says
    if REAL_MLAGENTS:
        assert all(type(a) is ActionTuple for a in env.log["actions"])


def test_memory_of_an_ended_agent_starts_again_from_zeros_and_reset_forgets():
    folder, reference = example("lstm")
    policy = I.load(folder)
    rng = np.random.RandomState(3)
    obs = [observation(rng, (10,), 2) for _ in range(4)]
    for t in range(3):
        policy.get_action(decision_steps([obs[t]], [7, 8], None))
    fresh = reference.run([obs[3][:1]], None, np.zeros((1, 32), np.float32))
    ended = policy.get_action(decision_steps([obs[3][:1]], [7], None), terminal_steps([obs[3][:1]], [7]))
    assert np.array_equal(ended.discrete, fresh["discrete"].astype(np.int32))
    assert max_rel_err(policy.memories[7], fresh["memory"][0]) <= TOL
    assert 8 in policy.memories
    policy.reset([8])
    assert 8 not in policy.memories and 7 in policy.memories
    policy.reset()
    assert policy.memories == {}


def test_zero_agents_give_empty_actions_of_the_right_widths():
    folder, _ = example("hybrid")  # 3 continuous + discrete [2]
    policy = I.load(folder)
    spec = behavior_spec(folder)
    steps = DecisionSteps.empty(spec) if REAL_MLAGENTS else decision_steps([np.zeros((0, 12), np.float32)], [], None)
    action = policy.get_action(steps)
    assert action.continuous.shape == (0, 3) and action.continuous.dtype == np.float32
    assert action.discrete.shape == (0, 1) and action.discrete.dtype == np.int32
    out = policy.act(np.zeros((0, 12), np.float32))
    assert out["continuous_actions"].shape == (0, 3) and out["discrete_actions"].shape == (0, 1)
    with pytest.raises(I.UsageError, match="expected shape"):
        policy.act(np.zeros((0, 13), np.float32))


def test_actions_are_mlagents_action_tuple_or_the_same_fields():
    folder, reference = example("sac-continuous")
    policy = I.load(folder)
    rng = np.random.RandomState(0)
    obs = [observation(rng, (16,), 5)]
    action = policy.get_action(decision_steps(obs, range(5), None))
    assert type(action) is (ActionTuple if REAL_MLAGENTS else I.Actions)
    assert action.continuous.shape == (5, 4) and action.continuous.dtype == np.float32
    assert action.discrete.shape == (5, 0) and action.discrete.dtype == np.int32
    assert max_rel_err(action.continuous, reference.run(obs)["continuous"]) <= TOL


def test_check_spec_names_the_first_difference():
    folder, _ = example("lstm-camera-nonsquare")  # camera [1, 24, 30], vector [3]; discrete [3, 2]
    policy = I.load(folder)
    spec = behavior_spec(folder)
    assert policy.check_spec(spec) is None
    obs, actions = list(spec.observation_specs), spec.action_spec
    with pytest.raises(I.UsageError, match=r"1 observation\(s\), this policy takes 2"):
        policy.check_spec(BehaviorSpec(obs[:1], actions))
    with pytest.raises(I.UsageError, match=r"observation 0 \(sensor0\) has shape \[1, 30, 24\].*\[1, 24, 30\]"):
        policy.check_spec(BehaviorSpec([obs[0]._replace(shape=(1, 30, 24)), obs[1]], actions))
    with pytest.raises(I.UsageError, match=r"discrete branches \[3, 3\], this policy \[3, 2\]"):
        policy.check_spec(BehaviorSpec(obs, actions._replace(discrete_branches=(3, 3))))
    with pytest.raises(I.UsageError, match="2 continuous action"):
        policy.check_spec(BehaviorSpec(obs, actions._replace(continuous_size=2)))


def usage_error(call, match: str) -> None:
    """A UsageError with a one-line message matching `match`: never another exception, never an answer."""
    with pytest.raises(I.UsageError, match=match) as err:
        call()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "change",
    [
        "shape 10.7",
        "branch 4.5",
        "size nan",
        "size inf",
        "size True",
        "shape None",
        "shape text",
        "branches None",
        "specs None",
    ],
)
def test_check_spec_refuses_sizes_that_are_not_whole_numbers(change):
    """10.7 is not read as 10, nor 4.5 as 4: anything but whole numbers is a UsageError naming it (issue 26)."""
    folder, _ = example("lstm-camera-nonsquare")  # camera [1, 24, 30], vector [3]; discrete [3, 2]
    policy = I.load(folder)
    spec = behavior_spec(folder)
    obs, actions = list(spec.observation_specs), spec.action_spec
    changed = {
        "shape 10.7": lambda: BehaviorSpec([obs[0], obs[1]._replace(shape=(3.7,))], actions),
        "branch 4.5": lambda: BehaviorSpec(obs, actions._replace(discrete_branches=(3, 2.5))),
        "size nan": lambda: BehaviorSpec(obs, actions._replace(continuous_size=float("nan"))),
        "size inf": lambda: BehaviorSpec(obs, actions._replace(continuous_size=float("inf"))),
        "size True": lambda: BehaviorSpec(obs, actions._replace(continuous_size=True)),
        "shape None": lambda: BehaviorSpec([obs[0]._replace(shape=None), obs[1]], actions),
        "shape text": lambda: BehaviorSpec([obs[0], obs[1]._replace(shape="3")], actions),
        "branches None": lambda: BehaviorSpec(obs, actions._replace(discrete_branches=None)),
        "specs None": lambda: BehaviorSpec(None, actions),
    }[change]()
    usage_error(lambda: policy.check_spec(changed), r"the behavior's .*(whole number|expected a list)")
    assert (
        policy.check_spec(
            BehaviorSpec(
                [obs[0]._replace(shape=np.array([1, 24, 30])), obs[1]],
                actions._replace(discrete_branches=(np.int32(3), 2)),
            )
        )
        is None
    )


@pytest.mark.parametrize("name", ["lstm", "hybrid"])
def test_get_action_refuses_an_agent_id_twice_and_a_refused_call_changes_nothing(name):
    """ML-Agents never sends one agent twice in a step: two rows of one id would each compute a next memory and
    the second would silently win. Refused, naming the id, before any memory is forgotten or kept (issue 26)."""
    folder, _ = example(name)
    policy = I.load(folder)
    spec = behavior_spec(folder)
    rng = np.random.RandomState(4)
    shapes = [tuple(o.shape) for o in spec.observation_specs]
    branches = tuple(spec.action_spec.discrete_branches)
    policy.get_action(decision_steps([observation(rng, s, 2) for s in shapes], [5, 6], mlagents_mask(rng, 2, branches)))
    before = {agent: memory.copy() for agent, memory in policy.memories.items()}
    twice = decision_steps([observation(rng, s, 3) for s in shapes], [7, 5, 5], mlagents_mask(rng, 3, branches))
    usage_error(
        lambda: policy.get_action(twice, terminal_steps([observation(rng, s, 1) for s in shapes], [6])),
        "agent id 5 appears more than once",
    )
    assert before.keys() == policy.memories.keys()
    assert all(np.array_equal(before[agent], policy.memories[agent]) for agent in before)


def _steps(ids, obs=(np.zeros((2, 10), np.float32),)):
    return types.SimpleNamespace(obs=obs if obs is None else list(obs), agent_id=ids, action_mask=None)


ONE = np.zeros(10, np.float32)
HOSTILE = {  # policy (examples/lstm: vector [10], discrete [4], memory 32) -> the call, and what the message says
    "mask of text": (lambda p: p.act(ONE, ["1", "1", "1", "1"]), "action_masks: holds <U1 values, expected numbers"),
    "complex mask": (lambda p: p.act(ONE, np.array([1, 1, 1, 1j])), "action_masks: holds complex128 values"),
    "complex memory": (lambda p: p.act(ONE, memory=np.full(32, 1j)), "memory: holds complex128 values"),
    "memory of text": (lambda p: p.act(ONE, memory=["0"] * 32), "memory: holds <U1 values"),
    "masked values": (lambda p: p.act(np.ma.masked_array(np.ones(10), mask=[1] + [0] * 9)), "masked .missing. values"),
    "meta tensor": (lambda p: p.act(torch.zeros(10, device="meta")), "torch tensor .* cannot be read"),
    "deterministic text": (lambda p: p.get_action(_steps([1, 2]), deterministic="yes"), "deterministic='yes'"),
    "float ids": (lambda p: p.get_action(_steps([1.5, 2.5])), "decision_steps: agent ids must be whole numbers"),
    "text ids": (lambda p: p.get_action(_steps(["a", "b"])), "decision_steps: agent ids must be whole numbers"),
    "None ids": (lambda p: p.get_action(_steps([None, None])), "decision_steps: agent ids must be whole numbers"),
    "ragged ids": (lambda p: p.get_action(_steps([[1], [2, 3]])), "decision_steps: agent ids must be whole numbers"),
    "more ids than rows": (lambda p: p.get_action(_steps([1, 2, 3])), r"3 agent id\(s\) but 2 observation"),
    "obs None": (lambda p: p.get_action(_steps([1], None)), "decision_steps.obs: expected ML-Agents' list of arrays"),
    "not steps": (lambda p: p.get_action(object()), "expected mlagents_envs' DecisionSteps"),
    "terminal ids": (
        lambda p: p.get_action(_steps([1, 2]), types.SimpleNamespace(agent_id=[{}])),
        "terminal_steps: agent",
    ),
    "reset text": (lambda p: p.reset("abc"), "agent_ids: agent ids must be whole numbers"),
    "reset float": (lambda p: p.reset(1.5), "agent_ids: agent ids must be whole numbers"),
    "reset set": (lambda p: p.reset({1, 2}), "agent_ids: agent ids must be whole numbers"),
    "load dtype array": (lambda p: I.load(EXAMPLES / "vector", dtype=np.array(["float32", "x"])), "dtype array"),
    "load engine array": (lambda p: I.load(EXAMPLES / "vector", engine=np.array(["auto", "x"])), "engine array"),
    "load graphs text": (lambda p: I.load(EXAMPLES / "vector", graphs="no"), "graphs='no'"),
    "load onnx number": (lambda p: I.load(EXAMPLES / "vector", onnx=123), "onnx 123"),
    "load onnx empty": (lambda p: I.load(EXAMPLES / "vector", onnx=""), "onnx ''"),
    "load long path": (lambda p: I.load("a" * 5000), "File name too long"),
}


@pytest.fixture(scope="module")
def lstm_policy():
    return I.load(EXAMPLES / "lstm")


@pytest.mark.parametrize("case", list(HOSTILE))
def test_the_api_refuses_hostile_arguments_in_one_line(lstm_policy, case):
    """act(), get_action(), reset() and load() given what is not numbers, ids, flags or paths: a one-line
    UsageError each, never a TypeError/ValueError/KeyError/OSError, never an answer (issue 26)."""
    call, match = HOSTILE[case]
    usage_error(lambda: call(lstm_policy), match)


# ---------------------------------------------------------------------------------------------
# Masks: the two conventions
# ---------------------------------------------------------------------------------------------


def test_mlagents_mask_as_decision_steps_hold_it_is_never_chosen():
    folder, reference = example("discrete-multi")  # obs [20], [6]; discrete [3, 2, 5]
    policy = I.load(folder)
    rng = np.random.RandomState(5)
    rows = 3000
    obs = [observation(rng, (20,), rows), observation(rng, (6,), rows)]
    mask = mlagents_mask(rng, rows, (3, 2, 5))
    steps = decision_steps(obs, range(rows), mask)
    for deterministic in (True, False):
        assert masked_chosen(policy.get_action(steps, deterministic=deterministic).discrete, mask) == 0
        assert masked_chosen(policy.act(obs, mask, deterministic=deterministic)["discrete_actions"], mask) == 0
    ours = policy.act(obs, mask)["discrete_actions"]
    genuine, _, examples = discrete_mismatches(ours, reference.run(obs, allowed(mask)), 1e-5)
    assert genuine == 0, examples
    one = policy.act([o[0] for o in obs], [m[0] for m in mask])["discrete_actions"]  # one agent: [size] each
    assert masked_chosen(one[None], [m[:1] for m in mask]) == 0


def test_a_single_bool_array_is_refused_naming_both_conventions():
    policy = I.load(EXAMPLES / "discrete-multi")
    obs = [np.zeros((2, 20), np.float32), np.zeros((2, 6), np.float32)]
    for mask in (np.ones((2, 10), bool), np.ones(10, bool).tolist()):
        with pytest.raises(I.UsageError) as err:
            policy.act(obs, mask)
        assert "True = masked" in str(err.value) and "1 = allowed" in str(err.value)


def test_gymnasium_masks_numbers_per_branch_or_concatenated_are_one_allowed():
    folder, reference = example("discrete-multi")
    policy = I.load(folder)
    rng = np.random.RandomState(8)
    obs = [observation(rng, (20,), 1)[0], observation(rng, (6,), 1)[0]]
    per_branch = tuple(np.array(m, np.int8) for m in ([0, 1, 0], [1, 0], [0, 0, 1, 1, 0]))  # 1 = allowed
    flat = np.concatenate(per_branch).astype(np.float32)
    got = policy.act(obs, per_branch)["discrete_actions"]
    assert np.array_equal(got, policy.act(obs, flat)["discrete_actions"])
    assert got[0] == 1 and got[1] == 0 and got[2] in (2, 3)
    assert np.array_equal(got, reference.run([o[None] for o in obs], flat[None])["discrete"][0])


def test_the_fast_path_still_refuses_what_the_checks_refuse():
    """Inputs of the same dtype and shape as an accepted call take the fast path: bad values must
    still be refused, and a mask changed in place is checked again."""
    policy = I.load(EXAMPLES / "lstm")  # vector [10], discrete [4], memory 32
    obs, mask, memory = np.ones((1, 10), np.float32), np.ones((1, 4), np.float32), np.zeros((1, 32), np.float32)
    for _ in range(2):
        policy.act(obs, mask, memory=memory)
    for bad in (np.nan, np.inf, -np.inf):
        x = obs.copy()
        x[0, 3] = bad
        with pytest.raises(I.UsageError, match="nan, inf"):
            policy.act(x, mask, memory=memory)
        m = memory.copy()
        m[0, 5] = bad
        with pytest.raises(I.UsageError, match="memory: row 0 holds nan, inf"):
            policy.act(obs, mask, memory=m)
    mask[0, 1] = 0.5
    with pytest.raises(I.UsageError, match="0 .forbidden. or 1"):
        policy.act(obs, mask, memory=memory)
    mask[:] = 0.0
    with pytest.raises(I.UsageError, match="allows no action"):
        policy.act(obs, mask, memory=memory)
    as_float64 = policy.act(obs.astype(np.float64), np.ones(4), memory=memory.astype(np.float64))
    same = policy.act(obs, np.ones((1, 4), np.float32), memory=memory)
    assert np.array_equal(as_float64["discrete_actions"], same["discrete_actions"])


# ---------------------------------------------------------------------------------------------
# Sampling noise
# ---------------------------------------------------------------------------------------------


def test_sampling_draws_fresh_noise_and_a_seed_reproduces_the_documented_draw():
    reference = OnnxReference(BUNDLED / "Huggy.onnx")
    policy = I.load(BUNDLED)
    rng = np.random.RandomState(2)
    obs = rng.randn(64, 59).astype(np.float32)
    first, second = (policy.act(obs, deterministic=False)["continuous_actions"] for _ in range(2))
    assert not np.array_equal(first, second)
    again = [policy.act(obs, deterministic=False, seed=5)["continuous_actions"] for _ in range(2)]
    assert np.array_equal(again[0], again[1])
    # the README's convention, computed here: z = randn(rows, size) from Generator().manual_seed(seed)
    z = torch.randn((64, 21), generator=torch.Generator().manual_seed(5)).numpy().astype(np.float64)
    ref = reference.run([obs])
    sigma = np.exp(reference.log_sigma_param.astype(np.float64)).reshape(-1)
    want = np.clip(ref["mu"].astype(np.float64) + sigma * z, -3, 3) / 3
    assert np.abs(again[0] - want).max() <= TOL
    one = policy.act(obs[0], deterministic=False)["continuous_actions"]
    assert one.shape == (21,) and not np.array_equal(one, policy.act(obs[0], deterministic=False)["continuous_actions"])


def test_a_policy_seed_repeats_its_sequence_and_os_seeds_differ():
    folder, _ = example("discrete-multi")
    rng = np.random.RandomState(4)
    obs = [observation(rng, (20,), 256), observation(rng, (6,), 256)]

    def draws(policy):
        return [policy.act(obs, deterministic=False)["discrete_actions"] for _ in range(3)]

    a, b = draws(I.load(folder, seed=3)), draws(I.load(folder, seed=3))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], a[1])
    c, d = draws(I.load(folder)), draws(I.load(folder))
    assert not np.array_equal(c[0], d[0])
    steps = decision_steps(obs, range(256), None)
    policy = I.load(folder)
    assert not np.array_equal(
        policy.get_action(steps, deterministic=False).discrete, policy.get_action(steps, deterministic=False).discrete
    )
    with pytest.raises(I.UsageError, match="seed"):
        I.load(folder, seed=-1)


# ---------------------------------------------------------------------------------------------
# Camera frames as uint8
# ---------------------------------------------------------------------------------------------


def test_uint8_camera_frames_are_pixels_scaled_as_image_files():
    folder, reference = example("visual-simple")  # camera [3, 36, 36], vector [5]
    policy = I.load(folder)
    rng = np.random.RandomState(6)
    frames = rng.randint(0, 256, (4, 3, 36, 36)).astype(np.uint8)
    vector = observation(rng, (5,), 4)
    pixels = frames.astype(np.float32) / np.float32(255)
    flat, _, _ = policy.prepare([frames, vector])
    assert np.array_equal(flat[0], pixels)
    got = policy.act([frames, vector])["continuous_actions"]
    assert max_rel_err(got, reference.run([pixels, vector])["continuous"]) <= TOL
    assert np.abs(got).max() < 1.0  # (0..255 taken as floats drives every action to ±1)
    one = policy.act([frames[1], vector[1]])["continuous_actions"]
    assert max_rel_err(one, got[1]) <= TOL
    action = policy.get_action(decision_steps([frames, vector], range(4), None))
    assert max_rel_err(action.continuous, got) <= TOL
    # a uint8 vector is numbers, not pixels
    small = rng.randint(0, 4, (4, 5)).astype(np.uint8)
    flat, _, _ = policy.prepare([pixels, small])
    assert np.array_equal(flat[1], small.astype(np.float32))


# ---------------------------------------------------------------------------------------------
# --onnx that belongs to another policy
# ---------------------------------------------------------------------------------------------

MODES = [
    "info",
    "action",
    "sample",
    "batch",
    "precision",
    "onnx-compare",
    "export-onnx",
    "fingerprint",
    "stats",
    "benchmark",
    "stream",
]


@pytest.mark.parametrize(
    "folder,foreign",
    [
        (EXAMPLES / "sac-continuous", EXAMPLES / "vector" / "Vector.onnx"),  # the checkpoint needs no ONNX
        (BUNDLED, EXAMPLES / "lstm" / "Memory.onnx"),  # Huggy and another example's
        (EXAMPLES / "vector", EXAMPLES / "sac-continuous" / "SacContinuous.onnx"),  # its shapes do not fit the layers
        (EXAMPLES / "visual-simple", EXAMPLES / "visual-nature_cnn" / "VisualNature.onnx"),
    ],
)
def test_another_policys_onnx_fails_every_mode_as_not_this_policy(capsys, tmp_path, folder, foreign):
    for mode in MODES:
        extra = {"export-onnx": ["--output", tmp_path / "out.onnx"], "benchmark": ["--runs", "5"]}.get(mode, [])
        args = ["--mode", mode, "--model-dir", folder, "--onnx", foreign, *extra]
        if mode == "stream":  # (--json does not apply: every line is JSON already)
            code, out, err = I.main(list(map(str, args))), None, capsys.readouterr().err
        else:
            code, out, err = call(capsys, *args)
        assert code == 1, (mode, code, err)
        assert "not this policy" in err and err.count("\n") == 1, (mode, err)
        assert "no ML-Agents ONNX" not in err and "not a usable" not in err and "Traceback" not in err, (mode, err)
        if mode != "stream":
            assert out["passed"] is False and "not this policy" in out["not_this_policy"], (mode, out)
    assert not (tmp_path / "out.onnx").exists()
    with pytest.raises(I.NotThisPolicy, match="not this policy"):
        I.load(folder, onnx=foreign)


def test_the_own_onnx_and_an_earlier_step_of_the_same_run_are_not_refused(capsys):
    code, _, err = call(
        capsys, "--mode", "info", "--model-dir", EXAMPLES / "vector", "--onnx", EXAMPLES / "vector" / "Vector.onnx"
    )
    assert code == 0, err
    code, out, err = call(
        capsys,
        "--mode",
        "onnx-compare",
        "--model-dir",
        EXAMPLES / "vector",
        "--onnx",
        EXAMPLES / "vector" / "Vector" / "Vector-50000.onnx",
    )
    assert code == 1 and out["max_abs_err"] > 1e-4 and "not_this_policy" not in out  # compared, and differs


def test_agent_memories_forget_and_clear_keep_the_byte_count():
    """get_action and the stream share AgentMemories: forgetting an id (a terminal step, reset) gives its bytes
    back, and past max_ids the least recently kept id goes, not the first ever kept."""
    memories = AgentMemories(max_ids=2)
    memories.keep(1, np.zeros(4, np.float32))
    memories.keep(2, np.zeros(4, np.float32))
    memories.keep(1, np.ones(4, np.float32))  # agent 1 acts again
    memories.keep(3, np.zeros(4, np.float32))  # agent 2, idle longest, makes room
    assert list(memories) == [1, 3] and memories.nbytes == 2 * AgentMemories.cost(1, np.zeros(4, np.float32))
    memories.forget(1)
    memories.forget(99)
    assert list(memories) == [3] and memories.nbytes == AgentMemories.cost(3, np.zeros(4, np.float32))
    memories.clear()
    assert memories == {} and memories.nbytes == 0


# --- the Python API's arguments -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def huggy():
    return I.load(BUNDLED)


X = np.random.RandomState(1).randn(59).astype(np.float32)


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"deterministic": "false"}, "deterministic"),
        ({"deterministic": None}, "deterministic"),
        ({"deterministic": False, "seed": 2**70}, "seed"),
        ({"deterministic": False, "seed": 1.5}, "seed"),
        ({"deterministic": False, "seed": "3"}, "seed"),
        ({"deterministic": False, "generator": 123}, "generator"),
    ],
)
def test_act_arguments_are_usage_errors(huggy, kwargs, words):
    usage_error(lambda: huggy.act(X, **kwargs), words)


def test_act_with_input_names_that_are_not_text(huggy):
    usage_error(lambda: huggy.act({0: X}), "input names")
    usage_error(lambda: huggy.act({"obs_0": X, 1: X}), "input names")


def test_tensors_are_taken_as_cpu_arrays(huggy):
    """A tensor that requires grad (or a float64, a bfloat16 one) gives the numpy answer."""
    want = huggy.act(X)["continuous_actions"]
    reference = ort_deterministic(BUNDLED / "Huggy" / "Huggy-600017.onnx", X[None])[0]
    assert np.abs(want - reference).max() < 1e-5
    for value in (
        torch.tensor(X, requires_grad=True),
        {"obs_0": torch.tensor(X, dtype=torch.float64)},
        [torch.tensor(X)],
    ):
        assert np.array_equal(huggy.act(value)["continuous_actions"], want)
    rows = torch.tensor(np.stack([X, X]), requires_grad=True)
    assert np.array_equal(huggy.act(rows)["continuous_actions"], np.stack([want, want]))
    sampled = huggy.act(X, deterministic=np.bool_(False), seed=np.int64(3))["continuous_actions"]
    assert np.array_equal(sampled, huggy.act(X, deterministic=False, seed=3)["continuous_actions"])
    generated = huggy.act(X, deterministic=False, generator=torch.Generator().manual_seed(3))["continuous_actions"]
    assert np.array_equal(generated, sampled)


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"path": None}, "path None"),
        ({"path": 123}, "path 123"),
        ({"path": ""}, "path"),
        ({"device": torch.device("meta")}, "meta"),
        ({"device": None}, "device None"),
        ({"engine": "bogus"}, "engine 'bogus'"),
        ({"engine": "Torch"}, "engine 'Torch'"),
        ({"engine": None}, "engine"),
        ({"dtype": "float8"}, "dtype"),
        ({"dtype": torch.float32}, "dtype"),
        ({"expect_sha256": 5}, "expect_sha256"),
    ],
)
def test_load_arguments_are_usage_errors(kwargs, words):
    kwargs = {"path": BUNDLED, **kwargs}
    usage_error(lambda: I.load(**kwargs), words.replace("(", r"\("))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a host with a CUDA GPU")
def test_load_on_an_absent_gpu_is_a_usage_error():
    usage_error(lambda: I.load(BUNDLED, device=torch.device("cuda:0")), "no CUDA GPU")


def test_an_unknown_engine_name_is_not_taken_as_auto(huggy):
    usage_error(lambda: I.Policy(huggy.checkpoint, "cpu", "float32", "ONNXRUNTIME"), "engine")
