"""ML-Agents' own ONNX run by itself, torch-free (MLAgentsOnnx: 2.x and 1.x interfaces, older files without
deterministic outputs): the reference of the checks, and the engine of the torch-free install (FileCheckpoint,
load_file_policy)."""

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ..core.buckets import bucket_of, bucket_sizes, compiles_per_shape, padded_rows
from ..core.errors import NotThisPolicy, UsageError
from ..core.files import short_path
from ..core.onnx_graph import (
    OnnxGraph,
    OnnxInterface,
    file_input_groups,
    file_named_settings,
    onnx_input_shapes,
    onnx_sensors,
    onnx_settings,
    read_onnx_interface,
)
from ..core.sessions import onnx_session, ort_reason
from ..core.sources import check_sha256
from ..core.spec import GoalInput, PolicySettings, deterministic_continuous, deterministic_discrete, step_outputs

__all__ = [
    "branch_order",
    "MLAgentsOnnx",
    "sampled_tensors",
    "FileCheckpoint",
    "read_policy_onnx",
    "graph_errors",
    "read_policy_graph",
    "load_file_policy",
]


def branch_order(model, logits: list) -> list:
    """Each branch's masked logits (a Softmax's input) in the order the file's discrete output concatenates the
    branches (1.x: their log-probabilities; early 2.x: their draws); in node order when that cannot be told."""
    producer = {name: n for n in model.graph.node for name in n.output}
    concat = producer.get(next((o.name for o in model.graph.output if o.name in ("discrete_actions", "action")), ""))
    order = []
    for name in concat.input if concat is not None and concat.op_type == "Concat" else []:
        for _ in range(8):  # back through Multinomial, Log, the Add of an epsilon to the branch's Softmax
            node = producer.get(name)
            if node is None or node.op_type == "Softmax" or not node.input:
                break
            name = node.input[0]
        order.append(node.input[0] if node is not None and node.op_type == "Softmax" else "")
    return order if sorted(order) == sorted(logits) else logits


class MLAgentsOnnx:
    """An ML-Agents ONNX file run by a bare onnxruntime session: the reference. Reads ML-Agents 2.x+ files (obs_i
    inputs, deterministic_* outputs) and older ones (1.x: one vector_observation input; without deterministic_* outputs
    the action mean and each branch's masked logits are read out of the graph). An engine (engines.factory's table)."""

    name = "onnxruntime"
    rows_independent = True  # (a row's outputs do not depend on the other rows of its call)

    def __init__(
        self,
        path: Path,
        settings: PolicySettings,
        threads: Optional[int] = None,
        providers: Optional[list] = None,
        sampling: bool = False,
        spin: bool = True,
    ):
        import onnx

        self.path, self.settings = path, settings
        self.iface = read_onnx_interface(path)
        want = [tuple(spec.shape) for spec in settings.inputs]  # direct: a policy that takes the file's own inputs
        self.direct = [tuple(self.iface.inputs.get(spec.name, ())[1:]) for spec in settings.inputs] == want
        shapes = None if self.direct else onnx_input_shapes(self.iface, dict(enumerate(settings.inputs)))
        if not self.direct and (shapes is None or [tuple(a) for a in shapes] != want):
            raise NotThisPolicy(f"takes inputs {shapes}, the checkpoint {[list(i.shape) for i in settings.inputs]}")
        try:
            outputs, model = self.iface.outputs, onnx.load(str(path))
        except Exception as exc:  # external data outside its folder, missing or damaged
            raise UsageError(
                f"{short_path(path)}: cannot read its weights "
                f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__})"
            )
        self.fetch, self.logit_names, exposed = [], [], []
        if settings.continuous_size:
            if "deterministic_continuous_actions" in outputs:
                self.fetch.append("deterministic_continuous_actions")
            else:  # older files: expose mu (the Gemm of action_model._continuous_distribution.mu) and clip it here
                self.mu_name = next(
                    (
                        n.output[0]
                        for n in model.graph.node
                        if n.op_type == "Gemm"
                        and any(i.endswith("_continuous_distribution.mu.weight") for i in n.input)
                    ),
                    None,
                )
                if self.mu_name is None:
                    raise UsageError(
                        f"{path}: no deterministic_continuous_actions output and no mu layer to read; "
                        f"cannot compare continuous actions with it"
                    )
                exposed.append(self.mu_name)
        if settings.discrete_branches:
            if "deterministic_discrete_actions" in outputs:
                self.fetch.append("deterministic_discrete_actions")
            else:  # older files (1.x: log-probabilities; 2.x: sampled actions): each branch's masked logits
                self.logit_names = branch_order(
                    model,
                    [
                        n.input[0]
                        for n in model.graph.node
                        if n.op_type == "Softmax" and any(a.name == "axis" and a.i in (1, -1) for a in n.attribute)
                    ],
                )
                if len(self.logit_names) != len(settings.discrete_branches):
                    raise UsageError(
                        f"{path}: no deterministic_discrete_actions output and not one Softmax per "
                        f"branch to read; cannot compare discrete actions with it"
                    )
                exposed += self.logit_names
        if settings.memory_size:
            if "recurrent_out" not in outputs:
                raise UsageError(f"{path}: no recurrent_out output; cannot compare the memory with it")
            self.fetch.append("recurrent_out")
        self.sampled = sampled_tensors(model, settings, path) if sampling else {}
        self.fetch += exposed  # (deterministic(): the sampled tensors below are run() alone's)
        exposed += [
            name
            for name in dict.fromkeys(
                self.sampled.get("mu", []) + self.sampled.get("sigma", []) + self.sampled.get("probabilities", [])
            )
            if name not in exposed
        ]
        model.graph.output.extend(
            onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
            for name in exposed
            if name not in outputs
        )
        self.model = model.SerializeToString() if exposed else str(path)  # what the session runs
        self.session = onnx_session(
            self.model, tuned=False, threads=threads, label=short_path(path), providers=providers, spin=spin
        )
        self.providers = self.session.get_providers()
        binding = getattr(
            self.session, "_sess", None
        )  # (its run skips the checks InferenceSession.run repeats: engines)
        self._run = binding.run if callable(getattr(binding, "run", None)) else self.session.run
        self._plans: dict = {}
        # CANN's graph engine compiles a graph for each new input shape: rows padded to fixed buckets (core.buckets)
        self.buckets = bucket_sizes() if compiles_per_shape(self.session) else None

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        """The engines' outputs (spec.step_outputs) for engine-layout inputs, from the file itself: its deterministic
        outputs (or mu and masked logits read out of its graph), and for sampling its mu and sigma ("sigma" stands for
        SAC's log_sigma) and each branch's masked probabilities."""
        names = names or [
            n
            for n in ("mu", "deterministic_continuous_actions", "deterministic_discrete_actions", "recurrent_out")
            if n in step_outputs(self.settings, True) or n == "mu" and "mu" in self.sampled
        ]
        plan = self._plans.get(tuple(names))
        if plan is None:
            plan = self._plans[tuple(names)] = self._plan(names)
        fetch, steps = plan
        rows = len(flat[0])
        bucket = bucket_of(self.buckets, rows) if self.buckets is not None else None
        if bucket is not None and bucket != rows:  # (the padding rows: zeros, every action allowed; sliced off)
            flat = padded_rows(flat, bucket, len(self.settings.inputs) if self.settings.discrete_branches else None)
        try:
            values = self._run(fetch, self.feed(flat), None)
        except Exception as exc:
            raise UsageError(f"{short_path(self.path)}: onnxruntime cannot run it ({ort_reason(exc)})")
        if bucket is not None and bucket != rows:
            return {name: step(values, bucket)[:rows] for name, step in steps}
        return {name: step(values, rows) for name, step in steps}

    def _plan(self, names: list) -> tuple:
        s, fetch, steps = self.settings, [], []

        def at(name: str) -> int:
            if name not in fetch:
                fetch.append(name)
            return fetch.index(name)

        outputs = self.iface.outputs
        for name in names:
            if name == "deterministic_continuous_actions" and name in outputs:
                k = at(name)
                steps.append((name, lambda v, rows, k=k: np.reshape(v[k], (rows, s.continuous_size))))
            elif name == "deterministic_continuous_actions":
                k = at(self.mu_name)
                steps.append(
                    (name, lambda v, rows, k=k: deterministic_continuous(np.reshape(v[k], (rows, -1)), s.tanh_squash))
                )
            elif name == "deterministic_discrete_actions" and name in outputs:
                k = at(name)
                steps.append((name, lambda v, rows, k=k: np.reshape(v[k], (rows, -1)).astype(np.int64)))
            elif name == "deterministic_discrete_actions":
                ks = [at(n) for n in self.logit_names]
                steps.append(
                    (name, lambda v, rows, ks=ks: deterministic_discrete([np.reshape(v[k], (rows, -1)) for k in ks]))
                )
            elif name in ("mu", "log_sigma"):
                part = "mu" if name == "mu" else "sigma"
                if part not in self.sampled:
                    raise UsageError(
                        f"{short_path(self.path)}: its graph does not show the action distribution "
                        f"(no RandomNormalLike sampling); sampling needs the torch install"
                    )
                k = at(self.sampled[part][0])
                steps.append(
                    (
                        "mu" if name == "mu" else "sigma",
                        lambda v, rows, k=k: np.broadcast_to(
                            np.reshape(v[k], (-1, s.continuous_size)), (rows, s.continuous_size)
                        ),
                    )
                )
            elif name == "probabilities":
                if "probabilities" not in self.sampled:
                    raise UsageError(
                        f"{short_path(self.path)}: its graph does not show each branch's probabilities "
                        f"(one Softmax per branch); sampling needs the torch install"
                    )
                ks = [at(n) for n in self.sampled["probabilities"]]
                steps.append(
                    (name, lambda v, rows, ks=ks: np.concatenate([np.reshape(v[k], (rows, -1)) for k in ks], axis=1))
                )
            elif name == "recurrent_out":
                k = at(name)
                steps.append((name, lambda v, rows, k=k: np.reshape(v[k], (rows, 1, s.memory_size))))
            else:
                raise UsageError(f"{short_path(self.path)}: no output {name} to read")
        return fetch, steps

    def feed(self, flat: list) -> dict:
        """The file's inputs for engine-layout inputs (a 1.x file: see legacy_input_shapes)."""
        s, n, names, feed = self.settings, len(self.settings.inputs), self.iface.inputs, {}
        if self.iface.legacy_inputs and not self.direct:
            rows = len(flat[0])
            vectors = [x.reshape(rows, -1) for x, spec in zip(flat[:n], s.inputs) if spec.kind == "vector"]
            if "vector_observation" in names:
                feed["vector_observation"] = (
                    np.ascontiguousarray(np.concatenate(vectors, axis=1))
                    if vectors
                    else np.zeros((rows, 0), np.float32)
                )
            for i, (x, spec) in enumerate(zip(flat[:n], s.inputs)):
                if spec.kind == "visual":
                    name = f"visual_observation_{sum(1 for t in s.inputs[:i] if t.kind == 'visual')}"
                    channels_last = tuple(names[name][1:]) != tuple(spec.shape)
                    feed[name] = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if channels_last else x
                elif spec.kind == "entities":
                    feed[spec.name] = x
        else:
            feed.update({spec.name: x for spec, x in zip(s.inputs, flat[:n]) if spec.name in names})
        if s.discrete_branches and "action_masks" in names:
            feed["action_masks"] = flat[n]
        if s.memory_size and "recurrent_in" in names:
            feed["recurrent_in"] = flat[-1] if len(names["recurrent_in"]) == 3 else flat[-1][:, 0]
        return feed

    def deterministic(self, flat: list) -> dict:
        """ML-Agents' deterministic actions (and next memory) for engine-layout inputs; NotThisPolicy
        when its answers have other shapes than this checkpoint's."""
        s, rows = self.settings, len(flat[0])
        try:
            values = dict(zip(self.fetch, self.session.run(self.fetch, self.feed(flat))))
        except Exception as exc:  # e.g. an input declared wider than the checkpoint's
            raise UsageError(f"{short_path(self.path)}: onnxruntime cannot run it ({ort_reason(exc)})")
        want = {
            "deterministic_continuous_actions": (rows, s.continuous_size),
            "deterministic_discrete_actions": (rows, len(s.discrete_branches)),
            "recurrent_out": (rows, 1, s.memory_size),
            **{name: (rows, size) for name, size in zip(self.logit_names, s.discrete_branches)},
        }
        if s.continuous_size and "deterministic_continuous_actions" not in values:
            want[self.mu_name] = (rows, s.continuous_size)
        for name, value in values.items():
            if np.size(value) != math.prod(want[name]):
                raise NotThisPolicy(
                    f"answers {name} of shape {list(np.shape(value))}, the checkpoint's is {list(want[name])}"
                )
            values[name] = np.reshape(value, want[name])
        out = {}
        if s.continuous_size and "deterministic_continuous_actions" in values:
            out["continuous_actions"] = values["deterministic_continuous_actions"]
        elif s.continuous_size:
            out["continuous_actions"] = deterministic_continuous(values[self.mu_name], s.tanh_squash)
        if s.discrete_branches and "deterministic_discrete_actions" in values:
            out["discrete_actions"] = values["deterministic_discrete_actions"].astype(np.int64)
        elif s.discrete_branches:
            out["discrete_actions"] = deterministic_discrete([values[name] for name in self.logit_names])
        if s.memory_size:
            out["memory"] = values["recurrent_out"].reshape(rows, s.memory_size)
        return out


def sampled_tensors(model, settings: PolicySettings, path: Path) -> dict:
    """What ML-Agents' graph samples from, as its tensors: "mu" and "sigma" (mu + RandomNormalLike(mu) * sigma; SAC's
    tanh comes after), "probabilities" (each branch's Softmax output, in the order the discrete output concatenates
    the branches). A part the graph does not show is left out (sampling it is then refused)."""
    producer = {name: n for n in model.graph.node for name in n.output}
    consumers: dict = {}
    for n in model.graph.node:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    out = {}
    if settings.continuous_size:
        for draw in (n for n in model.graph.node if n.op_type == "RandomNormalLike"):
            mul = next((c for c in consumers.get(draw.output[0], []) if c.op_type == "Mul" and len(c.input) == 2), None)
            add = (
                next((c for c in consumers.get(mul.output[0], []) if c.op_type == "Add" and len(c.input) == 2), None)
                if mul is not None
                else None
            )
            if add is not None:
                out["sigma"] = [mul.input[1] if mul.input[0] == draw.output[0] else mul.input[0]]
                out["mu"] = [add.input[1] if add.input[0] == mul.output[0] else add.input[0]]
                break
    if settings.discrete_branches:
        concat = producer.get(
            next((o.name for o in model.graph.output if o.name in ("discrete_actions", "action")), "")
        )
        starts = (
            list(concat.input)
            if concat is not None and concat.op_type == "Concat"
            else [concat.output[0]]
            if concat is not None
            else []
        )
        found = []
        for name in starts:
            for _ in range(8):  # back through Multinomial, Log, Add of an epsilon, ArgMax to the branch's Softmax
                node = producer.get(name)
                if node is None or node.op_type == "Softmax" or not node.input:
                    break
                name = node.input[0]
            if node is not None and node.op_type == "Softmax":
                found.append(node.output[0])
        if len(found) == len(settings.discrete_branches) and len(set(found)) == len(found):
            out["probabilities"] = found
    return out


@dataclass
class FileCheckpoint:
    """A policy read from its ML-Agents ONNX alone, for the torch-free install (checkpoint.LoadedCheckpoint's fields;
    no torch modules: the file itself runs)."""

    path: Path
    settings: PolicySettings
    onnx: OnnxInterface
    global_step: Optional[int] = None
    sha256: str = ""
    load_s: float = 0.0
    parameters: int = 0
    normalizers: list = field(default_factory=list)  # per input: (running mean, standard deviation), or None
    behavior: Optional[str] = (
        None  # the checkpoint's behaviour, when a checkpoint was named (the file's name may differ)
    )
    actor = None


def read_policy_onnx(path: Path, expect_sha256: Optional[str] = None) -> tuple:
    """(sha256, interface, model) of a policy's ML-Agents ONNX, the sha256 checked first; weights in external files
    are refused (ML-Agents writes them inside)."""
    import onnx

    sha = check_sha256(path, expect_sha256)
    interface = read_onnx_interface(path)
    model = onnx.load(str(path), load_external_data=False)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
        raise UsageError(f"{path}: keeps weights in external files; refused (ML-Agents writes them inside)")
    return sha, interface, model


@contextlib.contextmanager
def graph_errors(path: Path, suffix: str = ""):
    """A graph structure none of the readers knows (their KeyError, IndexError, ...) as one UsageError naming the
    file."""
    try:
        yield
    except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
        raise UsageError(
            f"{path}: its graph is not one ML-Agents writes ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:120] if str(exc) else ''}){suffix}"
        )


def read_policy_graph(
    path: Path, expect_sha256: Optional[str] = None, goal_input: GoalInput = None, suffix: str = ""
) -> tuple:
    """(sha256, interface, graph, sensors, settings) of a policy's ML-Agents ONNX (read_policy_onnx, then its graph);
    `suffix` ends graph_errors' message."""
    sha, interface, model = read_policy_onnx(path, expect_sha256)
    with graph_errors(path, suffix):
        g = OnnxGraph(model, path.name)
        sensors = onnx_sensors(g)
        return sha, interface, g, sensors, onnx_settings(g, sensors, goal_input)


def load_file_policy(
    path: Path,
    expect_sha256: Optional[str] = None,
    goal_input: GoalInput = None,
    step: Optional[int] = None,
    sensors_as_inputs: bool = False,
) -> FileCheckpoint:
    """An ML-Agents ONNX as a policy that runs as the file itself: its settings read from its graph (the inputs as the
    file names them; `sensors_as_inputs`: as its sensors, obs_0..obs_k, the checkpoint's inputs, which a 1.x file
    concatenates), its normalisers and weight count for info; no torch."""
    t0 = time.perf_counter()
    sha, interface, g, sensors, settings = read_policy_graph(path, expect_sha256, goal_input)
    with graph_errors(path):
        named = settings if sensors_as_inputs else file_named_settings(g, sensors, settings)
        groups = (
            file_input_groups(g, sensors, settings)[1] if named is not settings else [[i] for i in range(len(sensors))]
        )
        norms = [
            _graph_normalizer(g, [sensors[i].tensor for i in group]) if spec.normalized else None
            for spec, group in zip(named.inputs, groups)
        ]
        weights = g.weight_nodes(g.dependencies({s.tensor: i for i, s in enumerate(sensors)}))
        count = sum(
            v.size
            for w in weights
            if w.kind == "linear" or w.kind == "lstm" or w.kind.startswith("conv")
            for v in w.values
        )
        generated = [n for n in g.nodes if settings.hyper and n.op_type == "MatMul" and not g.weight(n.input[1])]
        for n in generated:  # the generated layer's own bias: x @ (the weights the hypernetwork generated) + bias
            while n.op_type != "Add" and len(g.consumers.get(n.output[0], [])) == 1:
                n = g.consumers[n.output[0]][0]
            count += sum(g.consts[i].size for i in n.input if n.op_type == "Add" and g.weight(i))
    return FileCheckpoint(path, named, interface, step, sha, time.perf_counter() - t0, int(count), norms)


def _graph_normalizer(g: OnnxGraph, tensors: list) -> Optional[tuple]:
    """A normaliser as the graph computes it, (x - mean) / std, for sensors read side by side: (mean, std) float64."""
    means, stds = [], []
    for tensor in tensors:
        sub = next((c for c in g.consumers.get(tensor, []) if c.op_type == "Sub" and g.weight(c.input[1])), None)
        div = (
            next((c for c in g.consumers.get(sub.output[0], []) if c.op_type == "Div" and g.weight(c.input[1])), None)
            if sub is not None
            else None
        )
        if div is None:
            return None
        means.append(g.consts[sub.input[1]].reshape(-1)), stds.append(g.consts[div.input[1]].reshape(-1))
    return np.concatenate(means).astype(np.float64), np.concatenate(stds).astype(np.float64)
