"""Every ML-Agents policy kind through the Python API (inference.load(...).act(...)), held to
ML-Agents' own ONNX beside each checkpoint run with a bare onnxruntime session (tests/mlagents_reference.py).

Fixtures: examples/* (one run folder per policy kind, written by ML-Agents 1.1.0 itself through
tools/mlagents_fixtures.py), the bundled Huggy sample, and examples/trained/* (Unity's trained example
models, older ONNX interface). Each policy is loaded once per engine
for the whole module; the observations are generated once per kind and sent as one batch.

Bars: continuous actions within 1e-5 of the ONNX (SAC's deterministic output is raw, unbounded mu -- up to
|20| with these observations -- so there 1e-5 * max(1, |value|)), LSTM memory within 1e-5 * max(1, |value|), and no
discrete action that differs from the ONNX's, except where the ONNX's own masked logits of the two
actions are equal to float32 noise (a near-tie, reported and bounded, never a real mismatch).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from conftest import BUNDLED, EXAMPLES, TRAINED, call, need, random_memories
from mlagents_reference import (
    TRAINED_SPLITS,
    OnnxReference,
    branch_slices,
    chosen_allowed,
    continuous_pit,
    discrete_mismatches,
    entity_obs,
    image_obs,
    ks_uniform,
    max_err,
    max_rel_err,
    one_hot_board,
    random_masks,
    vector_obs,
)

import inference as I
from mlagents_inference.api.policy import load_checkpoint
from mlagents_inference.core.observations import random_inputs
from mlagents_inference.core.spec import InputSpec
from mlagents_inference.loaders.checkpoint import pick_goal

ZOO = EXAMPLES  # the in-repository examples carry the development zoo's kinds under the same names
ENGINES = ("torch", "onnxruntime")
CONT_TOL = 1e-5
MEM_TOL = 1e-5
TIE = 2e-5  # relative logit gap below which two actions are a float32 tie (see discrete_mismatches)


@dataclass
class Kind:
    folder: Path
    onnx: Path
    inputs: list  # [(kind, shape)], kind in vector | visual | entities
    continuous: int = 0
    branches: list = field(default_factory=list)
    memory: int = 0
    trainer: Optional[str] = "ppo"  # None: not recorded in the files (trained/)
    shared_critic: bool = False
    normalize: bool = False
    encoder: Optional[str] = None
    goal: tuple = ()  # the goal-signal inputs of a hypernetwork body
    splits: Optional[list] = None  # legacy ONNX: the sensor widths inside vector_observation
    rows: int = 1000


def _zoo(folder, behavior, inputs, **kw) -> Kind:
    return Kind(ZOO / folder, ZOO / folder / f"{behavior}.onnx", inputs, **kw)


def _trained(name, **kw) -> Kind:
    return Kind(
        TRAINED / name,
        TRAINED / name / f"{name}.onnx",
        [("vector", [w]) for w in TRAINED_SPLITS[name]],
        trainer=None,
        splits=TRAINED_SPLITS[name],
        **kw,
    )


IMG = [3, 36, 36]
GRID = [4, 6, 6]
KINDS = {
    "discrete-multi": _zoo(
        "discrete-multi", "DiscreteMulti", [("vector", [20]), ("vector", [6])], branches=[3, 2, 5], normalize=True
    ),
    "hybrid": _zoo("hybrid", "Hybrid", [("vector", [12])], continuous=3, branches=[2], normalize=True),
    "multi-continuous": _zoo(
        "multi-continuous", "Crawlerish", [("vector", [30]), ("vector", [8])], continuous=6, normalize=True
    ),
    "sac-continuous": _zoo(
        "sac-continuous", "SacContinuous", [("vector", [16])], continuous=4, trainer="sac", normalize=True
    ),
    "poca-discrete": _zoo(
        "poca-discrete", "PocaDiscrete", [("vector", [14])], branches=[3, 3, 3], trainer="poca", normalize=True
    ),
    "shared-critic": _zoo(
        "shared-critic", "SharedCritic", [("vector", [10])], continuous=2, shared_critic=True, normalize=True
    ),
    "visual-simple": _zoo(
        "visual-simple", "VisualSimple", [("visual", IMG), ("vector", [5])], continuous=2, encoder="simple", rows=500
    ),
    "visual-nature_cnn": _zoo(
        "visual-nature_cnn",
        "VisualNature",
        [("visual", IMG), ("vector", [5])],
        branches=[3],
        normalize=True,
        encoder="nature_cnn",
        rows=500,
    ),
    "visual-resnet": _zoo(
        "visual-resnet",
        "VisualResnet",
        [("visual", IMG), ("vector", [5])],
        continuous=2,
        shared_critic=True,
        normalize=True,
        encoder="resnet",
        rows=500,
    ),
    "visual-match3": _zoo(
        "visual-match3",
        "VisualMatch3",
        [("visual", GRID), ("vector", [5])],
        branches=[6],
        shared_critic=True,
        normalize=True,
        encoder="match3",
        rows=500,
    ),
    "visual-fully_connected": _zoo(
        "visual-fully_connected",
        "VisualFC",
        [("visual", GRID), ("vector", [5])],
        continuous=2,
        encoder="fully_connected",
        rows=500,
    ),
    "lstm": _zoo("lstm", "Memory", [("vector", [10])], branches=[4], memory=32),
    "attention": _zoo("attention", "Attention", [("entities", [6, 5]), ("vector", [8])], branches=[3, 3], rows=700),
    "goal-hyper": _zoo("goal-hyper", "GoalHyper", [("vector", [12]), ("vector", [3])], branches=[5], goal=(1,)),
    # several goal signals (ML-Agents concatenates them), and a camera as the goal signal
    "goal-two-signals": Kind(
        EXAMPLES / "goal-two-signals",
        EXAMPLES / "goal-two-signals" / "GoalTwo.onnx",
        [("vector", [8]), ("vector", [2]), ("vector", [3])],
        continuous=2,
        normalize=True,
        goal=(1, 2),
    ),
    "goal-visual-signal": Kind(
        EXAMPLES / "goal-visual-signal",
        EXAMPLES / "goal-visual-signal" / "GoalVisual.onnx",
        [("vector", [6]), ("visual", [3, 20, 20])],
        branches=[3, 2],
        goal=(1,),
        encoder="simple",
        rows=500,
    ),
    # a camera with a non-square grey image beside an LSTM; two cameras after a vector
    "lstm-camera-nonsquare": Kind(
        EXAMPLES / "lstm-camera-nonsquare",
        EXAMPLES / "lstm-camera-nonsquare" / "LstmCam.onnx",
        [("visual", [1, 24, 30]), ("vector", [3])],
        branches=[3, 2],
        memory=16,
        normalize=True,
        encoder="simple",
        rows=500,
    ),
    "cameras-after-vector": Kind(
        EXAMPLES / "cameras-after-vector",
        EXAMPLES / "cameras-after-vector" / "CamsAfter.onnx",
        [("vector", [4]), ("visual", [3, 20, 24]), ("visual", [2, 21, 20])],
        continuous=2,
        normalize=True,
        encoder="simple",
        rows=500,
    ),
    "vector": _zoo("vector", "Vector", [("vector", [8])], continuous=2),
    "bundled-Huggy": Kind(BUNDLED, BUNDLED / "Huggy.onnx", [("vector", [59])], continuous=21, normalize=True),
}
# Unity's trained example models with the older ONNX interface (examples/trained/).
KINDS.update(
    {
        "3DBallHard": _trained("3DBallHard", continuous=2, normalize=True),
        "SoccerTwos": _trained("SoccerTwos", branches=[3, 3, 3]),
        "DungeonEscape": _trained("DungeonEscape", branches=[7]),
    }
)


def test_unitys_trained_policies_are_in_the_repository():
    """The older-interface trained models come with a clone (examples/trained/): none of their tests skips."""
    assert all(
        KINDS[name].folder.is_dir() and KINDS[name].onnx.is_file()
        for name in ("3DBallHard", "SoccerTwos", "DungeonEscape")
    )


DISCRETE = [k for k, v in KINDS.items() if v.branches]
CONTINUOUS = [k for k, v in KINDS.items() if v.continuous]
VECTOR_ONLY = [k for k, v in KINDS.items() if all(kind == "vector" for kind, _ in v.inputs) and not v.memory]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # (conftest.py)


# ---------------------------------------------------------------------------------------------
# Loaded once per module
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _policy(name: str, engine: str, goal_input=None):
    return I.load(str(KINDS[name].folder), device="cpu", dtype="float32", engine=engine, goal_input=goal_input)


def policy(name: str, engine: str = "torch", goal_input=None):
    kind = KINDS[name]
    need(kind.folder)
    need(kind.onnx)
    return _policy(name, engine, goal_input)


@lru_cache(maxsize=None)
def _reference(name: str) -> OnnxReference:
    return OnnxReference(KINDS[name].onnx, KINDS[name].splits)


def reference(name: str) -> OnnxReference:
    need(KINDS[name].onnx)
    return _reference(name)


def make_obs(kind: Kind, rng: np.random.RandomState, rows: int) -> list:
    obs = []
    for what, shape in kind.inputs:
        if what == "vector":
            obs.append(vector_obs(rng, rows, shape[0]))
        elif what == "visual":
            img = image_obs(rng, rows, shape)
            if shape[0] == 4:  # grid sensors: a third of the rows as one-hot boards
                img[: rows // 3] = one_hot_board(rng, rows // 3, shape)
            obs.append(img)
        else:
            obs.append(entity_obs(rng, rows, shape[0], shape[1])[0])
    return obs


@lru_cache(maxsize=None)
def _data(name: str):
    """(observations, masks, memory, the ONNX's deterministic outputs) for one kind."""
    kind, ref = KINDS[name], reference(name)
    rng = np.random.RandomState(sum(map(ord, name)))
    obs = make_obs(kind, rng, kind.rows)
    masks = random_masks(rng, kind.rows, kind.branches) if kind.branches else None
    memory = random_memories(rng, kind.rows, kind.memory) if kind.memory else None
    return obs, masks, memory, ref.run(obs, masks, memory)


def data(name: str):
    reference(name)
    return _data(name)


def check_against(name: str, out: dict, ref: dict, masks, rows: int, what: str = ""):
    """The API's deterministic output against the ONNX's: figures in every failure message."""
    kind = KINDS[name]
    label = f"{name}{what}"
    if kind.continuous:
        got = out["continuous_actions"]
        assert got.shape == (rows, kind.continuous) and got.dtype == np.float32, (label, got.shape, got.dtype)
        if kind.trainer == "sac":  # raw mu, unbounded (|mu| reaches ~20 here): float32 error grows with it
            err = max_rel_err(got, ref["continuous"])
            assert err <= CONT_TOL, (
                f"{label}: continuous max |err|/max(1,|v|) vs ONNX = {err:.3e} > {CONT_TOL:g} "
                f"(max |err| {max_err(got, ref['continuous']):.3e})"
            )
        else:
            err = max_err(got, ref["continuous"])
            assert err <= CONT_TOL, f"{label}: continuous max |err| vs ONNX = {err:.3e} > {CONT_TOL:g}"
    else:
        assert "continuous_actions" not in out, label
    if kind.branches:
        got = out["discrete_actions"]
        assert got.shape == (rows, len(kind.branches)) and got.dtype == np.int64, (label, got.shape, got.dtype)
        genuine, ties, examples = discrete_mismatches(got, ref, TIE)
        assert genuine == 0, (
            f"{label}: {genuine} discrete actions differ from the ONNX over {rows} rows "
            f"(row, branch, got, onnx, logit got, logit onnx): {examples}"
        )
        assert ties <= max(1, rows // 500), f"{label}: {ties} near-tie disagreements over {rows} rows"
        if masks is not None:
            assert chosen_allowed(got, masks, kind.branches), f"{label}: a masked-out action was chosen"
    else:
        assert "discrete_actions" not in out, label
    if kind.memory:
        got = out["memory"]
        assert got.shape == (rows, kind.memory) and got.dtype == np.float32, (label, got.shape, got.dtype)
        err = max_rel_err(got, ref["memory"])
        assert err <= MEM_TOL, f"{label}: memory max |err|/max(1,|v|) vs ONNX = {err:.3e} > {MEM_TOL:g}"
    else:
        assert "memory" not in out, label


# ---------------------------------------------------------------------------------------------
# What the policy says about itself
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KINDS))
def test_info_describes_the_policy(name):
    kind, info = KINDS[name], policy(name).info
    assert info["continuous_size"] == kind.continuous, info
    assert list(info["discrete_branches"]) == kind.branches, info
    assert info["memory_size"] == kind.memory, info
    if kind.trainer is None:
        assert info["trainer"] in ("ppo", "poca", None), info["trainer"]
    else:
        assert info["trainer"] == kind.trainer, info["trainer"]
    assert info["shared_critic"] is kind.shared_critic, info["shared_critic"]
    assert isinstance(info["parameters"], int) and info["parameters"] > 0
    assert isinstance(info["behavior"], str) and info["behavior"]
    inputs = info["inputs"]
    assert [i["name"] for i in inputs] == [f"obs_{j}" for j in range(len(kind.inputs))], inputs
    assert [(i["kind"], list(i["shape"])) for i in inputs] == [(k, s) for k, s in kind.inputs], inputs
    for j, (i, (what, _)) in enumerate(zip(inputs, kind.inputs)):
        assert i["normalized"] is (kind.normalize and what == "vector"), (j, i)
        assert i["goal"] is (j in kind.goal), (j, i)
        if what == "visual":
            assert isinstance(i["encoder"], str) and i["encoder"], (j, i)


# ---------------------------------------------------------------------------------------------
# Deterministic parity with the ONNX, every kind, both engines
# ---------------------------------------------------------------------------------------------

# Measured against the landed implementation (commit 6346193), 500 images: the torch engine's ResNet
# encoder is 1.21e-5 from the ONNX (2 of 500 rows above 1e-5; its own float32 error against a float64
# forward of the same modules is 1.04e-5, the ONNX's 6.7e-6). Kept visible, not loosened. The ONNX
# itself moves by as much: onnxruntime on ML-Agents' file at ORT_DISABLE_ALL (plain convolutions)
# against its default (NCHWc convolutions) differs by 0.70-1.21e-5 over six sets of 500 images.
# test_resnet_torch_engine_error_is_float32_rounding bounds it, so that a real fault cannot hide here.
RESNET_TORCH = pytest.mark.xfail(strict=False, reason="visual-resnet, torch engine: max |err| vs ONNX 1.21e-5 > 1e-5")


@pytest.mark.parametrize(
    "name,engine",
    [
        pytest.param(k, e, id=f"{k}-{e}", marks=RESNET_TORCH if (k, e) == ("visual-resnet", "torch") else ())
        for k in KINDS
        for e in ENGINES
    ],
)
def test_deterministic_matches_mlagents_onnx(name, engine):
    kind = KINDS[name]
    obs, masks, memory, ref = data(name)
    out = policy(name, engine).act(obs, action_masks=masks, memory=memory)
    check_against(name, out, ref, masks, kind.rows, f" [{engine}]")


def test_resnet_torch_engine_error_is_float32_rounding():
    """The expected failure above, bounded: on the ResNet encoder the torch engine and onnxruntime
    running ML-Agents' own ONNX are each float32 rounding away from a float64 forward of the same
    modules (the modules the onnxruntime engine runs bit-identically to the ONNX). Both are bounded
    by 2e-5 (measured here: 0.66-1.04e-5 each), so that a broken layer, layout or cast cannot pass
    as rounding."""
    obs, _, _, ref = data("visual-resnet")
    p = policy("visual-resnet", "torch")
    got = p.act(obs)["continuous_actions"]
    exact = p.reference(p.prepare(obs, None)[0])["deterministic_continuous_actions"]
    torch_err, onnx_err = max_err(got, exact), max_err(ref["continuous"], exact)
    assert torch_err <= 2e-5 and onnx_err <= 2e-5, (
        f"vs float64: torch engine {torch_err:.3e}, ML-Agents' ONNX {onnx_err:.3e} (bound 2e-5); "
        f"torch vs ONNX {max_err(got, ref['continuous']):.3e}"
    )


@pytest.mark.parametrize("name", [k for k in DISCRETE if not KINDS[k].memory and KINDS[k].inputs[0][0] == "vector"])
def test_default_mask_allows_everything(name):
    """No action_masks = every action allowed (the ONNX fed ones)."""
    kind = KINDS[name]
    obs = make_obs(kind, np.random.RandomState(5), 200)
    check_against(name, policy(name).act(obs), reference(name).run(obs), None, 200, " (no mask)")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", DISCRETE)
def test_branch_with_nothing_allowed_is_refused(name, engine):
    kind, p = KINDS[name], policy(name, engine)
    obs = make_obs(kind, np.random.RandomState(1), 4)
    for b, sl in enumerate(branch_slices(kind.branches)):
        masks = np.ones((4, sum(kind.branches)), np.float32)
        masks[2, sl] = 0
        with pytest.raises(I.UsageError):
            p.act(obs, action_masks=masks)


@pytest.mark.parametrize("engine", ENGINES)
def test_tied_actions_go_to_the_first_allowed_one(engine):
    """Branch layers zeroed: every allowed action of a branch is equally likely, and the deterministic
    action is the first allowed one (ML-Agents' torch.argmax and the ONNX ArgMax both take the first)."""
    kind = KINDS["discrete-multi"]
    need(kind.folder)
    checkpoint = load_checkpoint(next(kind.folder.glob("*/*.pt")))
    for weight in checkpoint.actor.action_model._discrete_distribution.branches.parameters():
        weight.data.zero_()
    rng = np.random.RandomState(3)
    masks = random_masks(rng, 300, kind.branches)
    got = I.Policy(checkpoint, engine=engine).act(make_obs(kind, rng, 300), action_masks=masks)["discrete_actions"]
    first_allowed = np.stack([masks[:, sl].argmax(axis=1) for sl in branch_slices(kind.branches)], axis=1)
    assert (got == first_allowed).all(), np.argwhere(got != first_allowed)[:5]


@pytest.mark.parametrize("name", ["discrete-multi", "hybrid", "attention"])
def test_mask_of_the_wrong_width_is_refused(name):
    kind, p = KINDS[name], policy(name)
    obs = make_obs(kind, np.random.RandomState(1), 3)
    for width in (sum(kind.branches) - 1, sum(kind.branches) + 1):
        with pytest.raises(I.UsageError):
            p.act(obs, action_masks=np.ones((3, width), np.float32))


@pytest.mark.parametrize("name", ["vector", "lstm"])
def test_non_final_checkpoints_match_their_own_onnx(name):
    """load() of a .pt file: every checkpoint against its own ONNX (written beside it; the final one's is
    <Behavior>.onnx at the top of the run folder)."""
    kind = KINDS[name]
    need(kind.folder)
    behavior = kind.onnx.stem
    checkpoints = sorted((kind.folder / behavior).glob(f"{behavior}-*.pt"), key=lambda p: int(p.stem.split("-")[-1]))
    assert len(checkpoints) >= 2
    rng = np.random.RandomState(11)
    for pt in checkpoints:
        ref = OnnxReference(pt.with_suffix(".onnx") if pt != checkpoints[-1] else kind.onnx)
        obs = make_obs(kind, rng, 256)
        masks = random_masks(rng, 256, kind.branches) if kind.branches else None
        out = I.load(str(pt), engine="torch").act(obs, action_masks=masks)
        check_against(name, out, ref.run(obs, masks), masks, 256, f" ({pt.name})")


# ---------------------------------------------------------------------------------------------
# Sampled actions
# ---------------------------------------------------------------------------------------------


def _sampled_rows(name):
    kind = KINDS[name]
    return 128 if any(what != "vector" for what, _ in kind.inputs) else 500


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", list(KINDS))
def test_sampled_actions_are_seeded_allowed_and_bounded(name, engine):
    kind, p = KINDS[name], policy(name, engine)
    obs, masks, memory, ref = data(name)
    rows = _sampled_rows(name)
    obs = [o[:rows] for o in obs]
    masks = None if masks is None else masks[:rows]
    memory = None if memory is None else memory[:rows]
    first = p.act(obs, action_masks=masks, deterministic=False, seed=7, memory=memory)
    again = p.act(obs, action_masks=masks, deterministic=False, seed=7, memory=memory)
    other = p.act(obs, action_masks=masks, deterministic=False, seed=8, memory=memory)
    if kind.memory:  # the next memory does not depend on the draw
        err = max_rel_err(first["memory"], ref["memory"][:rows])
        assert err <= MEM_TOL, f"{name} [{engine}]: memory while sampling vs ONNX {err:.3e}"
    for key in first:
        assert np.array_equal(first[key], again[key]), f"{name} [{engine}]: seed 7 twice, {key} differs"
    if kind.continuous:
        c = first["continuous_actions"]
        assert c.shape == (rows, kind.continuous) and c.dtype == np.float32
        assert np.isfinite(c).all() and np.abs(c).max() <= 1.0, f"{name}: sampled continuous outside [-1, 1]"
        assert not np.array_equal(c, other["continuous_actions"]), f"{name}: seeds 7 and 8 drew the same noise"
    if kind.branches:
        d = first["discrete_actions"]
        assert d.shape == (rows, len(kind.branches)) and d.dtype == np.int64
        assert chosen_allowed(d, masks, kind.branches), f"{name} [{engine}]: a sampled action is masked out"
        assert chosen_allowed(other["discrete_actions"], masks, kind.branches)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "name",
    [
        n
        for n in ["hybrid", "multi-continuous", "shared-critic", "3DBallHard", "sac-continuous", "visual-simple"]
        if n in KINDS
    ],
)
def test_sampled_continuous_follows_the_policy_distribution(name, engine):
    """PPO: clip(mu + exp(log_sigma) * eps, -3, 3) / 3; SAC: tanh(mu + exp(clamp(log_sigma(x), -20, 2)) * eps),
    eps ~ N(0, 1). mu and sigma from the ONNX; the draws' probability integral transform must be uniform
    (Kolmogorov-Smirnov distance below 2.2 / sqrt(n), a 1-in-10^4 event for a correct sampler)."""
    kind, p = KINDS[name], policy(name, engine)
    obs, masks, _, ref = data(name)
    tile = 1 if any(what != "vector" for what, _ in kind.inputs) else 4  # n = 4000 rows of vector policies
    obs = [np.concatenate([o] * tile) for o in obs]
    masks = None if masks is None else np.concatenate([masks] * tile)
    ref = {k: np.concatenate([v] * tile) for k, v in ref.items() if k in ("mu", "log_sigma")}
    sample = p.act(obs, action_masks=masks, deterministic=False, seed=3)["continuous_actions"]
    if kind.trainer == "sac":
        sigma = np.exp(np.clip(ref["log_sigma"].astype(np.float64), -20, 2))
    else:
        sigma = np.exp(reference(name).log_sigma_param.astype(np.float64))
    u = continuous_pit(sample, ref["mu"], sigma, sac=kind.trainer == "sac")
    d = ks_uniform(u)
    assert d < 2.2 / np.sqrt(len(u)), (
        f"{name} [{engine}]: sampled actions do not follow the policy's distribution (KS {d:.4f}, n={len(u)})"
    )


@pytest.mark.parametrize(
    "name", [n for n in ["discrete-multi", "hybrid", "poca-discrete", "goal-hyper", "SoccerTwos"] if n in KINDS]
)
def test_sampled_discrete_follows_softmax_of_masked_logits(name):
    """One observation repeated 4000 times: each action's frequency within 0.04 of softmax(masked logits)."""
    kind, p = KINDS[name], policy(name)
    obs, masks, _, _ = data(name)
    n = 4000
    rows = [o[3:4].repeat(n, axis=0) for o in obs]
    m = np.ones((1, sum(kind.branches)), np.float32)
    m[0, 1] = 0  # first branch: action 1 forbidden
    m = m.repeat(n, axis=0)
    ref = reference(name).run([r[:1] for r in rows], m[:1])
    got = p.act(rows, action_masks=m, deterministic=False, seed=5)["discrete_actions"]
    assert chosen_allowed(got, m, kind.branches)
    for b, logits in enumerate(ref["logits"]):
        z = logits[0].astype(np.float64)
        prob = np.exp(z - z.max())
        prob /= prob.sum()
        freq = np.bincount(got[:, b], minlength=len(prob)) / n
        assert np.abs(freq - prob).max() < 0.04, (
            f"{name} branch {b}: frequencies {freq.round(3)} vs softmax {prob.round(3)}"
        )


# ---------------------------------------------------------------------------------------------
# LSTM memory
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name,agents", [("lstm", 1), ("lstm", 5), ("lstm-camera-nonsquare", 4)])
def test_lstm_carried_rollout(name, engine, agents):
    """50 steps, memory from zeros, each side's next memory fed back to itself; every step compared."""
    kind, p, ref = KINDS[name], policy(name, engine), reference(name)
    rng = np.random.RandomState(100 + agents)
    mem_api = np.zeros((agents, kind.memory), np.float32)
    mem_ref = np.zeros((agents, kind.memory), np.float32)
    worst = 0.0
    for step in range(50):
        scale = rng.choice([0.3, 1.0, 3.0])
        obs = [
            x * np.float32(scale) if what == "vector" else x
            for x, (what, _) in zip(make_obs(kind, rng, agents), kind.inputs)
        ]
        masks = random_masks(rng, agents, kind.branches)
        want = ref.run(obs, masks, mem_ref)
        out = p.act(obs, action_masks=masks, memory=mem_api)
        check_against(name, out, want, masks, agents, f" [{engine}] step {step}")
        worst = max(worst, max_rel_err(out["memory"], want["memory"]))
        mem_api, mem_ref = out["memory"], want["memory"]
    assert worst <= MEM_TOL


def test_lstm_default_memory_is_zeros_and_unbatched_call():
    p, ref = policy("lstm"), reference("lstm")
    obs = vector_obs(np.random.RandomState(3), 6, 10)
    a = p.act(obs)
    b = p.act(obs, memory=np.zeros((6, 32), np.float32))
    assert np.array_equal(a["discrete_actions"], b["discrete_actions"])
    assert max_err(a["memory"], b["memory"]) <= 1e-6
    want = ref.run([obs])
    check_against("lstm", a, want, None, 6, " (default memory)")
    one = p.act(obs[0], memory=want["memory"][0])  # no batch axis on obs and memory
    assert one["discrete_actions"].shape == (1,) and one["memory"].shape == (32,)
    want1 = ref.run([obs[:1]], None, want["memory"][:1])
    assert max_rel_err(one["memory"], want1["memory"][0]) <= MEM_TOL


@pytest.mark.parametrize("width", [16, 31, 33, 64])
def test_lstm_memory_of_the_wrong_width_is_refused(width):
    p = policy("lstm")
    obs = vector_obs(np.random.RandomState(3), 2, 10)
    with pytest.raises(I.UsageError):
        p.act(obs, memory=np.zeros((2, width), np.float32))


def test_lstm_memory_refusal_names_the_shape_the_call_takes():
    p = policy("lstm")
    one = vector_obs(np.random.RandomState(3), 1, 10)
    with pytest.raises(I.UsageError, match=r"expected shape \[32\] or \[1, 32\] \(\[h, c\], 16 each\), got \[31\]"):
        p.act(one[0], memory=np.zeros(31, np.float32))  # one observation, no batch axis
    with pytest.raises(I.UsageError, match=r"expected shape \[1, 32\] .*got \[31\]"):
        p.act(one, memory=np.zeros(31, np.float32))  # a batch of one


def test_lstm_memory_rows_must_match_the_batch():
    p = policy("lstm")
    obs = vector_obs(np.random.RandomState(3), 3, 10)
    with pytest.raises(I.UsageError):
        p.act(obs, memory=np.zeros((2, 32), np.float32))


# ---------------------------------------------------------------------------------------------
# Device graphs (CUDA graphs; NPUGraph), on a CPU stand-in
# ---------------------------------------------------------------------------------------------


class StandInGraphs:
    """The part of torch.cuda's graph API that TorchEngine uses, on the CPU: capturing records the
    forward call's static inputs and outputs; replay recomputes from the static inputs into the
    static outputs in place, which is what replaying a captured device graph does. It checks the
    engine's own bookkeeping (static buffers, input order, the mask warm-up, outputs per shape)."""

    def __init__(self, engine):
        self.capturing, self.captures = False, 0
        forward = engine._forward

        def recorded(tensors, names=None):
            out = forward(tensors, names)
            if self.capturing:
                self.current.static = (tensors, out)
            return out

        engine._forward, self.forward = recorded, forward
        engine.api = engine.graph_api = self
        engine.graph_cls = lambda: StandInGraphs.Graph(self)
        engine.pinned = self.pinned

    class Graph:
        def __init__(self, api):
            self.api, self.static = api, None

        def replay(self):
            import torch

            tensors, out = self.static
            with torch.inference_mode():
                for dst, src in zip(out, self.api.forward(tensors)):
                    dst.copy_(src)

    @staticmethod
    def pinned(shape, dtype=None):  # (torch.empty(pin_memory=True) needs a card: plain host memory here)
        import torch

        return torch.empty(shape, dtype=dtype)

    class _Stream:
        def wait_stream(self, other):
            pass

        def synchronize(self):
            pass

    def Stream(self, device=None):
        return self._Stream()

    def current_stream(self, device=None):
        return self._Stream()

    def stream(self, stream):
        import contextlib

        return contextlib.nullcontext()

    def device(self, index):  # (the card's context: tests/test_accelerators.py holds which card each call runs on)
        import contextlib

        return contextlib.nullcontext()

    def graph(self, graph, stream=None):
        import contextlib

        @contextlib.contextmanager
        def capture():
            self.capturing, self.current, self.captures = True, graph, self.captures + 1
            try:
                yield
            finally:
                self.capturing = False

        return capture()


@pytest.mark.parametrize(
    "name", ["visual-nature_cnn", "attention", "lstm", "hybrid", "goal-hyper", "lstm-camera-nonsquare"]
)
def test_device_graph_replay_matches_the_onnx(name):
    """The torch engine's graph path (the default on CUDA, and on NPU where torch_npu has NPUGraph):
    each bucket captured once, every later call copied into the static inputs and replayed,
    results equal to the ONNX for new inputs each call (never a stale replay)."""
    kind = KINDS[name]
    need(kind.folder)
    p, ref = I.load(str(kind.folder), device="cpu", dtype="float32", engine="torch"), reference(name)
    api = StandInGraphs(p.engine)
    rng = np.random.RandomState(11)
    for step, rows in enumerate([5, 5, 3, 5, 3]):
        obs = make_obs(kind, rng, rows)
        masks = random_masks(rng, rows, kind.branches) if kind.branches else None
        memory = random_memories(rng, rows, kind.memory) if kind.memory else None
        out = p.act(obs, action_masks=masks, memory=memory)
        check_against(name, out, ref.run(obs, masks, memory), masks, rows, f" (graph replay, call {step})")
    assert p.engine.graph_api is api and api.captures == 2 and len(p.engine.graphs) == 2


# ---------------------------------------------------------------------------------------------
# Attention over a buffer sensor
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_attention_every_entity_count(engine):
    """0..6 entities, 100 samples each; zero rows for absent entities, a quarter of the samples with a
    near-zero row (squared sum < 0.01, absent for ML-Agents) and some with the rows shuffled."""
    kind, p, ref = KINDS["attention"], policy("attention", engine), reference("attention")
    rng = np.random.RandomState(21)
    per = 100
    counts = np.repeat(np.arange(7), per)
    ent, present = entity_obs(rng, len(counts), 6, 5, counts=counts, near_zero=0.25)
    for i in range(0, len(counts), 3):  # absent rows need not be at the end
        ent[i] = ent[i][rng.permutation(6)]
    vec = vector_obs(rng, len(counts), 8)
    masks = random_masks(rng, len(counts), kind.branches)
    assert (present < counts).sum() >= 50  # near-zero rows really are there
    want = ref.run([ent, vec], masks)
    out = p.act([ent, vec], action_masks=masks)
    for n in range(7):
        sel = counts == n
        sub = {"discrete": want["discrete"][sel], "logits": [l[sel] for l in want["logits"]]}
        check_against(
            "attention",
            {"discrete_actions": out["discrete_actions"][sel]},
            sub,
            masks[sel],
            per,
            f" [{engine}] {n} entities",
        )


def test_attention_in_float16_masks_without_nan(capsys):
    """ML-Agents' mask value, -1e6, is -inf in float16, and 0 * -inf made every probability NaN (seen first on an
    H200 by tools/device_check.sh, and the same on a CPU); float16 now stays near the float64 reference. The bound
    is precision's own tolerance, 0.01 (4e-4 measured on an x86 CPU and on the H200)."""
    need(KINDS["attention"].folder)
    code, out, _ = call(
        capsys, "--mode", "precision", "--dtype", "float16", "--samples", "50", "--model-dir", KINDS["attention"].folder
    )
    assert code == 0 and out["passed"], out
    assert np.isfinite(out["cos"]) and np.isfinite(out["max_abs_err"]) and out["max_abs_err"] < 0.01


def test_attention_near_zero_rows_count_as_absent():
    """Replacing the near-zero rows by exact zeros changes nothing, in the ONNX and in the API alike."""
    p, ref = policy("attention"), reference("attention")
    rng = np.random.RandomState(22)
    ent, _ = entity_obs(rng, 300, 6, 5, counts=rng.randint(1, 7, 300), near_zero=1.0)
    vec = vector_obs(rng, 300, 8)
    zeroed = ent.copy()
    zeroed[(zeroed**2).sum(axis=2) < 0.01] = 0.0
    got_near, got_zero = p.act([ent, vec])["discrete_actions"], p.act([zeroed, vec])["discrete_actions"]
    want = ref.run([ent, vec])
    check_against("attention", {"discrete_actions": got_near}, want, None, 300, " (near-zero rows)")
    check_against("attention", {"discrete_actions": got_zero}, want, None, 300, " (near-zero rows zeroed)")


@pytest.mark.parametrize("engine", ENGINES)
def test_attention_too_many_entities_is_refused(engine):
    p = policy("attention", engine)
    rng = np.random.RandomState(2)
    with pytest.raises(I.UsageError):
        p.act([rng.randn(2, 7, 5).astype(np.float32), rng.randn(2, 8).astype(np.float32)])
    with pytest.raises(I.UsageError):  # wrong feature count
        p.act([rng.randn(2, 6, 4).astype(np.float32), rng.randn(2, 8).astype(np.float32)])


# ---------------------------------------------------------------------------------------------
# Goal-conditioned (HyperNetwork)
# ---------------------------------------------------------------------------------------------


def test_goal_input_inferred_or_given():
    kind = KINDS["goal-hyper"]
    obs, masks, _, ref = data("goal-hyper")
    inferred = policy("goal-hyper")
    assert [i["goal"] for i in inferred.info["inputs"]] == [False, True]
    given = policy("goal-hyper", "torch", goal_input=1)
    assert [i["goal"] for i in given.info["inputs"]] == [False, True]
    for p, how in ((inferred, "inferred"), (given, "goal_input=1")):
        check_against("goal-hyper", p.act(obs, action_masks=masks), ref, masks, kind.rows, f" ({how})")


@pytest.mark.parametrize("goal_input", [0, 2, -5])
def test_goal_input_that_cannot_be_the_goal_is_refused(goal_input):
    """obs_0 is 12 wide, the hypernetwork takes 3; there is no obs_2."""
    need(KINDS["goal-hyper"].folder)
    with pytest.raises(I.UsageError):
        I.load(str(KINDS["goal-hyper"].folder), goal_input=goal_input)


# ---------------------------------------------------------------------------------------------
# How observations may be given, and what is refused
# ---------------------------------------------------------------------------------------------


def test_list_dict_and_unbatched_observations_agree():
    p = policy("discrete-multi")
    obs, masks, _, ref = data("discrete-multi")
    as_list = p.act([obs[0][:8], obs[1][:8]], action_masks=masks[:8])
    as_dict = p.act({"obs_1": obs[1][:8], "obs_0": obs[0][:8]}, action_masks=masks[:8])
    assert np.array_equal(as_list["discrete_actions"], as_dict["discrete_actions"])
    sub = {"discrete": ref["discrete"][:8], "logits": [l[:8] for l in ref["logits"]]}
    check_against("discrete-multi", as_list, sub, masks[:8], 8, " (list)")
    one = p.act([obs[0][4], obs[1][4]], action_masks=masks[4])
    assert one["discrete_actions"].shape == (3,)
    assert np.array_equal(one["discrete_actions"], as_list["discrete_actions"][4])


def test_single_input_policy_takes_a_bare_array():
    p = policy("hybrid")
    obs, masks, _, ref = data("hybrid")
    out = p.act(obs[0][:16], action_masks=masks[:16])
    assert out["continuous_actions"].shape == (16, 3) and out["discrete_actions"].shape == (16, 1)
    assert max_err(out["continuous_actions"], ref["continuous"][:16]) <= CONT_TOL
    one = p.act(obs[0][5], action_masks=masks[5])
    assert one["continuous_actions"].shape == (3,) and one["discrete_actions"].shape == (1,)
    assert max_err(one["continuous_actions"], ref["continuous"][5]) <= CONT_TOL


def test_unbatched_image_observation():
    p = policy("visual-simple")
    obs, _, _, ref = data("visual-simple")
    one = p.act([obs[0][7], obs[1][7]])
    assert one["continuous_actions"].shape == (2,)
    assert max_err(one["continuous_actions"], ref["continuous"][7]) <= CONT_TOL


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in ["discrete-multi", "multi-continuous", "visual-nature_cnn", "attention", "goal-hyper", "3DBallHard"]
        if n in KINDS
    ],
)
def test_wrong_input_count_is_refused(name):
    kind, p = KINDS[name], policy(name)
    obs = make_obs(kind, np.random.RandomState(4), 3)
    with pytest.raises(I.UsageError):
        p.act(obs[:-1])
    with pytest.raises(I.UsageError):
        p.act([*obs, obs[-1]])
    with pytest.raises(I.UsageError):  # a dict without one of the inputs
        p.act({f"obs_{j}": o for j, o in enumerate(obs[:-1])})


@pytest.mark.parametrize(
    "name", [n for n in ["discrete-multi", "hybrid", "goal-hyper", "3DBallHard", "SoccerTwos", "lstm"] if n in KINDS]
)
def test_wrong_input_size_is_refused(name):
    kind, p = KINDS[name], policy(name)
    rng = np.random.RandomState(4)
    for j, (_, shape) in enumerate(kind.inputs):
        for width in (shape[0] - 1, shape[0] + 1):
            obs = make_obs(kind, rng, 3)
            obs[j] = rng.randn(3, width).astype(np.float32)
            with pytest.raises(I.UsageError):
                p.act(obs)
    if len(kind.inputs) == 1:  # the concatenated width of a multi-input policy is no substitute either
        return
    with pytest.raises(I.UsageError):
        p.act(np.concatenate(make_obs(kind, rng, 3), axis=1))


def test_inputs_with_different_batch_sizes_are_refused():
    p = policy("discrete-multi")
    rng = np.random.RandomState(4)
    with pytest.raises(I.UsageError):
        p.act([rng.randn(4, 20).astype(np.float32), rng.randn(3, 6).astype(np.float32)])


def _numbers(text: str) -> str:
    return " " + re.sub(r"[^0-9]+", " ", text) + " "


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "name,bad",
    [
        ("visual-simple", [3, 32, 32]),
        ("visual-nature_cnn", [3, 40, 40]),
        ("visual-resnet", [1, 36, 36]),
        ("visual-match3", [4, 7, 6]),
        ("visual-fully_connected", [4, 6, 5]),
    ],
)
def test_wrong_image_size_is_refused_naming_the_input_and_both_shapes(name, bad, engine):
    kind, p = KINDS[name], policy(name, engine)
    rng = np.random.RandomState(4)
    obs = make_obs(kind, rng, 2)
    obs[0] = rng.uniform(0, 1, (2, *bad)).astype(np.float32)
    with pytest.raises(I.UsageError) as caught:
        p.act(obs)
    message = str(caught.value)
    good = kind.inputs[0][1]
    assert "obs_0" in message, message
    assert _numbers(" ".join(map(str, good))) in _numbers(message), f"expected shape {good} not in: {message}"
    assert _numbers(" ".join(map(str, bad))) in _numbers(message), f"given shape {bad} not in: {message}"
    assert "\n" not in message.strip()


def test_channel_last_image_is_refused():
    """ML-Agents 1.1.0 takes CHW; an HWC image must not be silently reinterpreted."""
    kind, p = KINDS["visual-simple"], policy("visual-simple")
    rng = np.random.RandomState(4)
    obs = make_obs(kind, rng, 2)
    obs[0] = np.moveaxis(obs[0], 1, -1).copy()
    with pytest.raises(I.UsageError):
        p.act(obs)


@pytest.mark.parametrize("name", ["discrete-multi", "hybrid", "sac-continuous"])
def test_actions_do_not_depend_on_the_batch_they_come_in(name):
    """Row i's deterministic action is the same alone or inside a batch (within the float bar)."""
    p = policy(name)
    obs, masks, _, ref = data(name)
    for i in (0, 17, 999):
        single = p.act([o[i : i + 1] for o in obs], action_masks=None if masks is None else masks[i : i + 1])
        sub = {k: (v[i : i + 1] if k != "logits" else [l[i : i + 1] for l in v]) for k, v in ref.items()}
        check_against(name, single, sub, None if masks is None else masks[i : i + 1], 1, f" row {i} alone")


@pytest.mark.parametrize(
    "name,goal_input", [("goal-two-signals", [1, 2]), ("goal-two-signals", (2, 1)), ("goal-visual-signal", 1)]
)
def test_goal_inputs_given_by_name(name, goal_input):
    kind = KINDS[name]
    obs, masks, _, ref = data(name)
    p = policy(name, "onnxruntime", goal_input=tuple(goal_input) if isinstance(goal_input, list) else goal_input)
    assert [i["goal"] for i in p.info["inputs"]] == [j in kind.goal for j in range(len(kind.inputs))]
    check_against(name, p.act(obs, action_masks=masks), ref, masks, kind.rows, f" (goal_input={goal_input})")


@pytest.mark.parametrize(
    "goal_input,says",
    [
        (1, "obs_1 is 2 wide"),
        ((0, 1), "= 10 wide"),
        ((), "no inputs named"),
        (1.0, "expected an input index"),
        (True, "expected an input index"),
        ("1", "expected an input index"),
    ],
)
def test_goal_inputs_that_do_not_make_the_goal_are_refused(goal_input, says):
    """The hypernetwork of goal-two-signals takes a 5-wide goal (obs_1, 2 wide, + obs_2, 3 wide)."""
    need(KINDS["goal-two-signals"].folder)
    with pytest.raises(I.UsageError, match=re.escape(says)):
        I.load(str(KINDS["goal-two-signals"].folder), goal_input=goal_input)


def test_goal_signal_that_the_widths_cannot_single_out_is_refused():
    """Goal 3 wide: obs_0 alone, or obs_1 + obs_2, fit; nothing in the files says which."""
    inputs = [
        InputSpec("obs_0", "vector", (3,)),
        InputSpec("obs_1", "vector", (2,)),
        InputSpec("obs_2", "vector", (1,)),
        InputSpec("obs_3", "visual", (3, 20, 20), encoder="simple"),
    ]
    with pytest.raises(I.UsageError, match=r"these fit: obs_0; obs_1\+obs_2 3 wide.*--goal-input"):
        pick_goal(inputs, 3, None, 16, Path("P.pt"))
    pick_goal(inputs, 18, None, 16, Path("P.pt"))  # the camera's 16-wide encoding + obs_1, and nothing else
    assert [s.goal for s in inputs] == [False, True, False, True]


def test_random_entity_buffers_hold_every_count_of_present_rows():
    """--obs random / onnx-compare's inputs: every count 0..N of present entities, zero rows after."""
    settings = policy("attention").settings
    entities = random_inputs(settings, 11, 700)[0]
    present = np.sum(entities**2, axis=2) >= 0.01
    counts = present.sum(axis=1)
    assert set(counts.tolist()) == set(range(7)), sorted(set(counts.tolist()))
    assert all(not present[r, c:].any() for r, c in enumerate(counts)), "a present row after an absent one"
    assert np.array_equal(random_inputs(settings, 11)[0], entities[0])  # row 0 is the unbatched draw
