"""The V2 tests' reference and request makers (tests/test_serve_v2.py, tests/test_v2_clients.py): each example's
ML-Agents ONNX through a bare onnxruntime session, the checks of an answer against it, random observations and
masks, the tensors of a request, and the outputs a kind has."""

import json

import numpy as np
from api_standins import observation
from conftest import EXAMPLES


class Reference:
    """examples/<kind>/<Behavior>.onnx in onnxruntime: every input the file takes (masks all allowed and memory zeros
    where the request leaves them out), its deterministic outputs."""

    def __init__(self, kind: str):
        import onnxruntime as ort

        self.spec = json.loads((EXAMPLES / kind / "generated.json").read_text())
        path = EXAMPLES / kind / f"{self.spec['behavior']}.onnx"
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i.shape for i in self.session.get_inputs()}
        self.outputs = [
            o.name
            for o in self.session.get_outputs()
            if o.name in ("deterministic_continuous_actions", "deterministic_discrete_actions", "recurrent_out")
        ]

    def __call__(self, obs: list, masks=None, memory=None) -> dict:
        rows = len(obs[0])
        feeds = {f"obs_{k}": np.asarray(o, np.float32) for k, o in enumerate(obs)}
        if "action_masks" in self.inputs:
            width = sum(self.spec["discrete_branches"])
            feeds["action_masks"] = np.ones((rows, width), np.float32) if masks is None else masks.astype(np.float32)
        if "recurrent_in" in self.inputs:
            size = self.spec["network_settings"]["memory"]["memory_size"]
            feeds["recurrent_in"] = (
                np.zeros((rows, 1, size), np.float32) if memory is None else memory.reshape(rows, 1, size)
            )
        return dict(zip(self.outputs, self.session.run(self.outputs, feeds)))


def shapes_of(kind: str) -> list:
    return [tuple(o["shape"]) for o in json.loads((EXAMPLES / kind / "generated.json").read_text())["observations"]]


def random_masks(rng, rows: int, branches) -> np.ndarray:
    """[rows, sum(branches)] float32, 1 = allowed, at least one action allowed per branch."""
    masks = (rng.rand(rows, sum(branches)) < 0.55).astype(np.float32)
    start = 0
    for size in branches:
        empty = np.flatnonzero(masks[:, start : start + size].sum(1) == 0)
        masks[empty, start + rng.randint(size, size=len(empty))] = 1
        start += size
    return masks


def check_against_reference(kind, ref, policy, got: dict, obs, masks=None, seed=None, memory=None) -> None:
    """A V2 answer (name -> array): deterministic outputs within 1e-5 of onnxruntime on the example's ONNX, discrete
    ones equal; sampled ones equal to policy.act(deterministic=False, seed=seed); a masked action never chosen."""
    want = ref(obs, masks, memory)
    rows = len(obs[0])
    if "deterministic_continuous_actions" in got:
        got_c = got["deterministic_continuous_actions"]
        assert got_c.dtype == np.float32 and got_c.shape == want["deterministic_continuous_actions"].shape
        np.testing.assert_allclose(got_c, want["deterministic_continuous_actions"], rtol=0, atol=1e-5)
    if "deterministic_discrete_actions" in got:
        got_d = got["deterministic_discrete_actions"]
        assert got_d.dtype == np.int64
        np.testing.assert_array_equal(got_d, want["deterministic_discrete_actions"])
    if "recurrent_out" in got:
        np.testing.assert_allclose(got["recurrent_out"], want["recurrent_out"], rtol=0, atol=1e-5)
    if seed is not None:
        m = None if memory is None else memory.reshape(rows, -1)
        sampled = policy.act(obs, action_masks=masks, deterministic=False, seed=seed, memory=m)
        for name in ("continuous_actions", "discrete_actions"):
            if name in sampled and name in got:
                assert got[name].shape == sampled[name].shape
                np.testing.assert_allclose(got[name], sampled[name], rtol=0, atol=1e-6)
    if masks is not None:
        for name in ("deterministic_discrete_actions", "discrete_actions"):
            if name in got:
                assert_never_masked(got[name], masks, ref.spec["discrete_branches"])


def assert_never_masked(actions: np.ndarray, masks: np.ndarray, branches) -> None:
    offsets = np.cumsum([0, *branches[:-1]])
    chosen = masks[np.arange(len(actions))[:, None], offsets[None, :] + actions]
    assert (chosen == 1).all(), "a masked action was chosen"


def make_inputs(srv, rng, rows: int) -> tuple:
    """(obs, masks or None) for a kind: random observations; random masks where it has discrete actions."""
    obs = [observation(rng, shape, rows) for shape in srv.shapes]
    branches = srv.ref.spec["discrete_branches"]
    return obs, (random_masks(rng, rows, branches) if branches else None)


def obs_tensors(obs: list, masks=None, memory=None) -> list:
    out = [(f"obs_{k}", "FP32", o) for k, o in enumerate(obs)]
    if masks is not None:
        out.append(("action_masks", "FP32", masks))
    if memory is not None:
        out.append(("recurrent_in", "FP32", memory))
    return out


def outputs_of(srv) -> list:
    """(name, datatype, dims) of the outputs the kind has, in the documented order."""
    s, out = srv.policy.settings, []
    if s.continuous_size:
        out += [("deterministic_continuous_actions", "FP32", [s.continuous_size])]
        out += [("continuous_actions", "FP32", [s.continuous_size])]
    if s.discrete_branches:
        out += [("deterministic_discrete_actions", "INT64", [len(s.discrete_branches)])]
        out += [("discrete_actions", "INT64", [len(s.discrete_branches)])]
    if s.memory_size:
        out += [("recurrent_out", "FP32", [1, s.memory_size])]
    return out
