"""The reference for the per-kind parity tests: ML-Agents' own ONNX beside each checkpoint, run with
a bare onnxruntime session. Nothing here calls inference.py.

Two ONNX interfaces exist among the fixtures:

* ML-Agents 1.1.0 (zoo/, ppo-*): one input per sensor (obs_0, obs_1, ...), action_masks, recurrent_in
  [B, 1, m]; outputs deterministic_continuous_actions / deterministic_discrete_actions / recurrent_out.
* the older interface of Unity's trained example models (examples/trained/): one input vector_observation with
  the sensors concatenated, action_masks; no deterministic_* outputs, continuous_actions is sampled and
  discrete_actions holds per-branch log-probabilities. The deterministic reference is derived from the
  graph itself: mu is the output of the Gemm whose weight is `..._continuous_distribution.mu.weight`
  (made an extra graph output), deterministic continuous = clip(mu, -3, 3) / 3; the masked logits of
  branch b are the output of the Sub that feeds branch b's Softmax (logits * m - 1e8 * (1 - m)),
  deterministic discrete = per-branch argmax of those.

The masked logits and mu are exposed for the 1.1.0 graphs as well: the tests use the logits to tell
genuine mismatches from near-ties (two actions whose logits differ by less than float32 noise), and mu /
log_sigma to check the distribution of sampled actions.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

BRANCH_WEIGHT = re.compile(r"_discrete_distribution\.branches\.(\d+)\.weight$")

# Sensor widths of the examples/trained/ checkpoints (examples/trained/README.md): the ONNX only has them concatenated.
TRAINED_SPLITS = {"3DBallHard": [27, 18], "SoccerTwos": [264, 72], "DungeonEscape": [10, 360, 1]}


def _initializer(model, name: str) -> Optional[np.ndarray]:
    from onnx import numpy_helper

    for init in model.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    return None


class OnnxReference:
    """One onnxruntime session on an ML-Agents ONNX, with mu, SAC's log_sigma layer and each branch's
    masked logits added as graph outputs."""

    def __init__(self, onnx_path: Path, splits: Optional[Sequence[int]] = None):
        import onnx
        import onnxruntime as ort

        self.path = Path(onnx_path)
        model = onnx.load(str(self.path))
        self.input_names = [i.name for i in model.graph.input if _initializer(model, i.name) is None]
        self.output_names = [o.name for o in model.graph.output]
        self.legacy = "vector_observation" in self.input_names
        if self.legacy and splits is None:
            raise ValueError(f"{self.path}: legacy interface, pass the sensor widths (splits)")
        self.splits = list(splits) if splits is not None else None
        nodes = list(model.graph.node)
        consumers: dict[str, list] = {}
        for node in nodes:
            for name in node.input:
                consumers.setdefault(name, []).append(node)
        extra: dict[str, str] = {}
        branch_logits: dict[int, str] = {}
        for node in nodes:
            if node.op_type != "Gemm" or len(node.input) < 2:
                continue
            weight = node.input[1]
            if weight.endswith("_continuous_distribution.mu.weight"):
                extra["mu"] = node.output[0]
            elif weight.endswith("_continuous_distribution.log_sigma.weight"):  # SAC: a layer
                extra["log_sigma"] = node.output[0]
            else:
                match = BRANCH_WEIGHT.search(weight)
                if match:  # Gemm -> Mul(logits, mask) -> Sub(that, 1e8 * (1 - mask)) -> Softmax
                    mul = next(c for c in consumers[node.output[0]] if c.op_type == "Mul")
                    sub = next(c for c in consumers[mul.output[0]] if c.op_type == "Sub")
                    assert any(c.op_type == "Softmax" for c in consumers[sub.output[0]]), weight
                    branch_logits[int(match.group(1))] = sub.output[0]
        self.n_branches = len(branch_logits)
        self.logit_names = [branch_logits[b] for b in range(self.n_branches)]
        for name in [*extra.values(), *self.logit_names]:
            if name not in self.output_names:
                model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
        self.extra = extra
        # PPO / POCA: log_sigma is a parameter [1, n]; SAC: a layer (exposed above).
        self.log_sigma_param = next(
            (
                _initializer(model, n)
                for n in ("action_model._continuous_distribution.log_sigma",)
                if _initializer(model, n) is not None
            ),
            None,
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # the machine has few cores; batches are small
        self.session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        self.recurrent = "recurrent_in" in self.input_names
        self.has_masks = "action_masks" in self.input_names
        self.mask_width = None
        for i in self.session.get_inputs():
            if i.name == "action_masks":
                self.mask_width = i.shape[1]
            if i.name == "recurrent_in":
                self.memory_size = i.shape[2]

    def feed(self, obs: Sequence[np.ndarray], masks=None, memory=None) -> dict:
        obs = [np.asarray(o, np.float32) for o in obs]
        rows = obs[0].shape[0]
        if self.legacy:
            assert [o.shape[1] for o in obs] == self.splits, ([o.shape for o in obs], self.splits)
            feed = {"vector_observation": np.concatenate(obs, axis=1)}
        else:
            names = [n for n in self.input_names if n.startswith("obs_")]
            assert len(names) == len(obs), (names, [o.shape for o in obs])
            feed = dict(zip(names, obs))
        if self.has_masks:
            feed["action_masks"] = (
                np.ones((rows, self.mask_width), np.float32) if masks is None else np.asarray(masks, np.float32)
            )
        if self.recurrent:
            m = np.zeros((rows, self.memory_size), np.float32) if memory is None else np.asarray(memory, np.float32)
            feed["recurrent_in"] = m.reshape(rows, 1, self.memory_size)
        return feed

    def run(self, obs: Sequence[np.ndarray], masks=None, memory=None) -> dict:
        """Deterministic reference: {"continuous", "discrete", "memory", "mu", "log_sigma", "logits"}
        (keys present only where the policy has them). memory in and out is [B, m]."""
        wanted = [
            n
            for n in ("deterministic_continuous_actions", "deterministic_discrete_actions", "recurrent_out")
            if n in self.output_names
        ]
        names = wanted + list(self.extra.values()) + self.logit_names
        values = dict(zip(names, self.session.run(names, self.feed(obs, masks, memory))))
        out: dict = {}
        if "mu" in self.extra:
            out["mu"] = values[self.extra["mu"]]
        if "log_sigma" in self.extra:
            out["log_sigma"] = values[self.extra["log_sigma"]]
        if "deterministic_continuous_actions" in values:
            out["continuous"] = values["deterministic_continuous_actions"]
        elif "mu" in out:  # legacy interface
            out["continuous"] = (np.clip(out["mu"], -3, 3) / 3).astype(np.float32)
        if self.logit_names:
            out["logits"] = [values[n] for n in self.logit_names]
            argmax = np.stack([l.argmax(axis=1) for l in out["logits"]], axis=1).astype(np.int64)
            if "deterministic_discrete_actions" in values:
                out["discrete"] = values["deterministic_discrete_actions"]
            else:  # legacy interface
                out["discrete"] = argmax
            out["logit_argmax"] = argmax
        if "recurrent_out" in values:
            out["memory"] = values["recurrent_out"].reshape(len(values["recurrent_out"]), -1)
        return out


# ---------------------------------------------------------------------------------------------
# Observations and masks
# ---------------------------------------------------------------------------------------------

SCALES = (0.1, 1.0, 3.0, 10.0)


def vector_obs(rng: np.random.RandomState, rows: int, width: int, scales=SCALES) -> np.ndarray:
    """Normal observations, the rows split between several scales (and a random offset per block)."""
    blocks = np.array_split(np.arange(rows), len(scales))
    out = np.empty((rows, width), np.float32)
    for block, scale in zip(blocks, scales):
        out[block] = rng.randn(len(block), width) * scale + rng.uniform(-scale, scale)
    return out


def image_obs(rng: np.random.RandomState, rows: int, shape: Sequence[int]) -> np.ndarray:
    """Uniform [0, 1] floats, channel-first."""
    return rng.uniform(0.0, 1.0, (rows, *shape)).astype(np.float32)


def one_hot_board(rng: np.random.RandomState, rows: int, shape: Sequence[int]) -> np.ndarray:
    """A one-hot grid [C, H, W] (one channel set per cell), as a match-3 board sensor sends."""
    c, h, w = shape
    idx = rng.randint(0, c, (rows, h, w))
    return np.moveaxis(np.eye(c, dtype=np.float32)[idx], -1, 1).copy()


def entity_obs(
    rng: np.random.RandomState,
    rows: int,
    max_entities: int,
    features: int,
    counts: Optional[np.ndarray] = None,
    near_zero: float = 0.25,
) -> tuple[np.ndarray, np.ndarray]:
    """Buffer-sensor observations [rows, N, F]: `counts[i]` real entities (present rows first, the rest
    zeros), and with probability `near_zero` one present row replaced by a near-zero row (squared sum
    < 0.01, which ML-Agents counts as absent). Returns (obs, counts of rows that count as present)."""
    if counts is None:
        counts = rng.randint(0, max_entities + 1, rows)
    obs = np.zeros((rows, max_entities, features), np.float32)
    present = np.zeros(rows, np.int64)
    for i, n in enumerate(counts):
        obs[i, :n] = rng.randn(n, features) * rng.choice([0.5, 1.0, 3.0])
        # a real entity always has squared sum well above the threshold
        small = (obs[i, :n] ** 2).sum(axis=1) < 0.05
        obs[i, :n][small] += 0.5
        if n and rng.rand() < near_zero:
            j = rng.randint(n)
            row = rng.randn(features)
            obs[i, j] = row / np.linalg.norm(row) * rng.uniform(0.0, 0.095)  # squared sum < 0.009
        present[i] = int(((obs[i] ** 2).sum(axis=1) >= 0.01).sum())
    return obs, present


def random_masks(
    rng: np.random.RandomState, rows: int, branches: Sequence[int], p_allowed: float = 0.6, all_allowed_every: int = 7
) -> np.ndarray:
    """[rows, sum(branches)] of 0/1 floats, at least one action allowed per branch; every
    `all_allowed_every`-th row allows everything."""
    masks = (rng.rand(rows, sum(branches)) < p_allowed).astype(np.float32)
    start = 0
    for size in branches:
        block = masks[:, start : start + size]
        empty = block.sum(axis=1) == 0
        block[empty, rng.randint(0, size, int(empty.sum()))] = 1.0
        start += size
    masks[::all_allowed_every] = 1.0
    return masks


def branch_slices(branches: Sequence[int]) -> list[slice]:
    out, start = [], 0
    for size in branches:
        out.append(slice(start, start + size))
        start += size
    return out


def chosen_allowed(actions: np.ndarray, masks: np.ndarray, branches: Sequence[int]) -> bool:
    """Every chosen discrete action is allowed by its branch's mask."""
    actions = np.asarray(actions)
    for b, sl in enumerate(branch_slices(branches)):
        a = actions[:, b]
        if a.min() < 0 or a.max() >= branches[b]:
            return False
        if not np.all(masks[:, sl][np.arange(len(a)), a] == 1):
            return False
    return True


def discrete_mismatches(got: np.ndarray, ref: dict, tie: float = 1e-4) -> tuple[int, int, list]:
    """(genuine mismatches, near-ties, examples). A mismatch is genuine unless the reference's masked
    logits of the two actions differ by less than `tie` * max(1, |logit|) -- float32 noise, which any
    engine on any CPU may resolve either way."""
    got = np.asarray(got)
    want = ref["discrete"]
    genuine, ties, examples = 0, 0, []
    for b, logits in enumerate(ref["logits"]):
        for i in np.nonzero(got[:, b] != want[:, b])[0]:
            g, w = logits[i, got[i, b]], logits[i, want[i, b]]
            if abs(float(w) - float(g)) <= tie * max(1.0, abs(float(w))):
                ties += 1
            else:
                genuine += 1
                if len(examples) < 5:
                    examples.append((int(i), b, int(got[i, b]), int(want[i, b]), float(g), float(w)))
    return genuine, ties, examples


def max_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64)).max())


def max_rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(1, |want|)."""
    want = np.asarray(want, np.float64)
    return float((np.abs(np.asarray(got, np.float64) - want) / np.maximum(1.0, np.abs(want))).max())


# ---------------------------------------------------------------------------------------------
# Sampled continuous actions against the policy's distribution
# ---------------------------------------------------------------------------------------------


def _ndtr(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.special.ndtr(torch.as_tensor(np.asarray(x, np.float64))).numpy()


def continuous_pit(sample: np.ndarray, mu: np.ndarray, sigma: np.ndarray, sac: bool) -> np.ndarray:
    """Randomised probability integral transform of sampled continuous actions: uniform on (0, 1) exactly
    when the draws follow ML-Agents' distribution given mu and sigma (from the ONNX):
    PPO/POCA  a = clip(mu + sigma * eps, -3, 3) / 3   (a draw at the clip stands for the whole tail beyond),
    SAC       a = tanh(mu + sigma * eps)                (|a| within 1e-5 of 1: float32 saturation, treated as a tail).
    """
    sample, mu, sigma = (np.asarray(v, np.float64) for v in (sample, mu, sigma))
    sigma = np.broadcast_to(sigma, mu.shape)
    if sac:
        edge = np.arctanh(1 - 1e-5)
        high, low = sample >= 1 - 1e-5, sample <= -(1 - 1e-5)
        x = np.arctanh(np.clip(sample, -(1 - 1e-5), 1 - 1e-5))
    else:
        edge = 3.0
        high, low = sample >= 1 - 1e-6, sample <= -(1 - 1e-6)
        x = 3 * sample
    u = _ndtr((x - mu) / sigma)
    v = np.random.RandomState(0).uniform(size=mu.shape)
    top, bottom = _ndtr((edge - mu) / sigma), _ndtr((-edge - mu) / sigma)
    u = np.where(high, top + v * (1 - top), u)
    u = np.where(low, v * bottom, u)
    return u.ravel()


def ks_uniform(u: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance of u from U(0, 1)."""
    u = np.sort(np.asarray(u, np.float64))
    n = len(u)
    return float(max((np.arange(1, n + 1) / n - u).max(), (u - np.arange(n) / n).max()))


def with_legacy_inputs(onnx_path: Path, target: Path, channels_last: bool = False) -> Path:
    """ML-Agents' own 1.1.0 ONNX given the input interface its serializer wrote before obs_N: every
    vector sensor concatenated in `vector_observation` (sliced inside the graph, opset-9 Slice), the
    k-th image as `visual_observation_k` ([C, H, W], as that serializer wrote it; [H, W, C] with
    `channels_last`, as the first torch prototype did), a buffer sensor still `obs_i`. The graph
    after its inputs is ML-Agents' own, untouched, so the numbers are ML-Agents'."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path))
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    dims = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim][1:] for i in inputs}
    sensors = sorted((n for n in dims if re.fullmatch(r"obs_\d+", n)), key=lambda n: int(n[4:]))
    front, new_inputs, start, images = [], [], 0, 0
    for name in sensors:
        shape = dims[name]
        if len(shape) == 1:
            front.append(
                helper.make_node(
                    "Slice", ["vector_observation"], [name], axes=[1], starts=[start], ends=[start + shape[0]]
                )
            )
            start += shape[0]
        elif len(shape) == 3:
            vis = f"visual_observation_{images}"
            images += 1
            c, h, w = shape
            if channels_last:
                front.append(helper.make_node("Transpose", [vis], [name], perm=[0, 3, 1, 2]))
                new_inputs.append(helper.make_tensor_value_info(vis, TensorProto.FLOAT, ["batch", h, w, c]))
            else:
                front.append(helper.make_node("Identity", [vis], [name]))
                new_inputs.append(helper.make_tensor_value_info(vis, TensorProto.FLOAT, ["batch", c, h, w]))
    moved = {n for n in sensors if len(dims[n]) != 2}
    kept = [i for i in graph.input if i.name not in moved]
    vector = [helper.make_tensor_value_info("vector_observation", TensorProto.FLOAT, ["batch", start])] if start else []
    del graph.input[:]
    graph.input.extend(vector + new_inputs + kept)
    nodes = front + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return target
