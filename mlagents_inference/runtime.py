"""onnxruntime, torch-free: sessions, and ML-Agents' own ONNX run as the reference
(MLAgentsOnnx: 2.x and 1.x interfaces, older files without deterministic outputs)."""
import math
import re
from pathlib import Path
from typing import Optional

import numpy as np

from .errors import NotThisPolicy, UsageError
from .onnx_reader import onnx_input_shapes, read_onnx_interface
from .outputs import _short_path
from .spec import PolicySettings, deterministic_continuous, deterministic_discrete


def onnx_session(model_or_path, tuned: bool = True, threads: Optional[int] = None, label: Optional[str] = None):
    """An onnxruntime CPU session; `tuned` enables every graph optimisation."""
    try:
        import onnxruntime as ort
    except ImportError as exc:  # (installed but broken is said as such, not as "not installed")
        import importlib.util
        raise UsageError("onnxruntime is not installed (pip install onnxruntime)" if importlib.util.find_spec("onnxruntime")
                         is None else f"onnxruntime cannot be imported ({str(exc).splitlines()[0][:160] if str(exc) else exc})")
    options = ort.SessionOptions()
    options.log_severity_level = 4  # its warnings and errors would print beside ours (its errors raise, and are told)
    if tuned:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    source = model_or_path if isinstance(model_or_path, bytes) else str(model_or_path)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise UsageError(f"{label or (model_or_path if isinstance(model_or_path, (str, Path)) else 'model')}: "
                         f"onnxruntime cannot load it ({ort_reason(exc)})")


def ort_reason(exc: Exception) -> str:
    """onnxruntime's message in one line, without its status code, the file's path again or its C++ source location."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : (Load model from .*? failed:)?", "", text)
    text = re.sub(r"^\S*onnxruntime\S*:\d+ [^(]*\([^)]*\) ", "", text)
    return text if len(text) <= 200 else text[:text.rfind(". ", 0, 200) + 1] or text[:200] + "..."


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
    the action mean and each branch's masked logits are read out of the graph)."""

    def __init__(self, path: Path, settings: PolicySettings, threads: Optional[int] = None):
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
            raise UsageError(f"{_short_path(path)}: cannot read its weights "
                             f"({str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__})")
        self.fetch, self.logit_names, exposed = [], [], []
        if settings.continuous_size:
            if "deterministic_continuous_actions" in outputs:
                self.fetch.append("deterministic_continuous_actions")
            else:  # older files: expose mu (the Gemm of action_model._continuous_distribution.mu) and clip it here
                self.mu_name = next((n.output[0] for n in model.graph.node if n.op_type == "Gemm"
                                     and any(i.endswith("_continuous_distribution.mu.weight") for i in n.input)), None)
                if self.mu_name is None:
                    raise UsageError(f"{path}: no deterministic_continuous_actions output and no mu layer to read; "
                                     f"cannot compare continuous actions with it")
                exposed.append(self.mu_name)
        if settings.discrete_branches:
            if "deterministic_discrete_actions" in outputs:
                self.fetch.append("deterministic_discrete_actions")
            else:  # older files (1.x: log-probabilities; 2.x: sampled actions): each branch's masked logits
                self.logit_names = branch_order(model, [n.input[0] for n in model.graph.node if n.op_type == "Softmax"
                                                        and any(a.name == "axis" and a.i in (1, -1) for a in n.attribute)])
                if len(self.logit_names) != len(settings.discrete_branches):
                    raise UsageError(f"{path}: no deterministic_discrete_actions output and not one Softmax per "
                                     f"branch to read; cannot compare discrete actions with it")
                exposed += self.logit_names
        if settings.memory_size:
            if "recurrent_out" not in outputs:
                raise UsageError(f"{path}: no recurrent_out output; cannot compare the memory with it")
            self.fetch.append("recurrent_out")
        model.graph.output.extend(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                                  for name in exposed)
        self.fetch += exposed
        self.model = model.SerializeToString() if exposed else str(path)  # what the session runs
        self.session = onnx_session(self.model, tuned=False, threads=threads, label=_short_path(path))

    def feed(self, flat: list) -> dict:
        """The file's inputs for engine-layout inputs (a 1.x file: see legacy_input_shapes)."""
        s, n, names, feed = self.settings, len(self.settings.inputs), self.iface.inputs, {}
        if self.iface.legacy_inputs and not self.direct:
            rows = len(flat[0])
            vectors = [x.reshape(rows, -1) for x, spec in zip(flat[:n], s.inputs) if spec.kind == "vector"]
            if "vector_observation" in names:
                feed["vector_observation"] = np.ascontiguousarray(np.concatenate(vectors, axis=1)) if vectors else \
                    np.zeros((rows, 0), np.float32)
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
            raise UsageError(f"{_short_path(self.path)}: onnxruntime cannot run it ({ort_reason(exc)})")
        want = {"deterministic_continuous_actions": (rows, s.continuous_size),
                "deterministic_discrete_actions": (rows, len(s.discrete_branches)),
                "recurrent_out": (rows, 1, s.memory_size),
                **{name: (rows, size) for name, size in zip(self.logit_names, s.discrete_branches)}}
        if s.continuous_size and "deterministic_continuous_actions" not in values:
            want[self.mu_name] = (rows, s.continuous_size)
        for name, value in values.items():
            if np.size(value) != math.prod(want[name]):
                raise NotThisPolicy(f"answers {name} of shape {list(np.shape(value))}, the checkpoint's is {list(want[name])}")
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
