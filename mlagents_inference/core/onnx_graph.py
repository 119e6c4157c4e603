"""Reading ML-Agents' ONNX, torch-free: its interface (inputs, outputs, shapes, 1.x names) and,
for a policy from an ONNX alone, its settings from the graph's structure (docs/policies.md)."""

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import numpy as np

from .errors import UsageError
from .files import short_path
from .geometry import encoder_from_kernels
from .spec import MAX_ENTITIES, GoalInput, InputSpec, PolicySettings, goal_indices

__all__ = [
    "OnnxInterface",
    "read_onnx_interface",
    "onnx_input_shapes",
    "legacy_input_shapes",
    "check_onnx_shapes",
    "onnx_shapes_agree",
    "ONNX_ONLY_SOURCE",
    "ONNX_PLUMBING",
    "ONNX_FOLD",
    "SETTINGS_KEYS",
    "WeightNode",
    "OnnxGraph",
    "OnnxSensor",
    "onnx_slices",
    "onnx_sensors",
    "onnx_settings",
    "file_input_groups",
    "file_named_settings",
]


@dataclass
class OnnxInterface:
    """The inputs and outputs of an ML-Agents ONNX file, read without running it."""

    path: Path
    inputs: dict  # name -> shape (dims as int, or None for the batch)
    outputs: list  # output names
    vector_slices: list  # legacy vector_observation: [(start, end)] per sensor, in order
    legacy: bool  # ML-Agents 1.x interface (vector_observation, no deterministic_* outputs)
    weights: dict = field(default_factory=dict)  # initializer name -> shape (names are state-dict keys)

    @property
    def legacy_inputs(self) -> bool:
        """Inputs as the serializer before obs_N wrote them (see legacy_input_shapes)."""
        return "vector_observation" in self.inputs or any(
            re.fullmatch(r"visual_observation_\d+", name) for name in self.inputs
        )


def _graph_inputs(model, initializers) -> dict:
    """The graph's inputs that are not initializers: name -> dims (int, or None where not fixed)."""
    return {
        i.name: tuple(d.dim_value if d.HasField("dim_value") else None for d in i.type.tensor_type.shape.dim)
        for i in model.graph.input
        if i.name not in initializers
    }


def read_onnx_interface(path: Path) -> OnnxInterface:
    try:
        import onnx
    except ImportError:
        raise UsageError("onnx is not installed (pip install onnx)")
    try:
        if path.stat().st_size > 2 << 30:
            raise UsageError(f"{path}: larger than 2 GiB, not an ML-Agents policy ONNX")
        model = onnx.load(str(path), load_external_data=False)
    except UsageError:
        raise
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})")
    except Exception as exc:
        raise UsageError(
            f"{path}: not an ONNX file ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
        )
    inputs = _graph_inputs(model, {i.name for i in model.graph.initializer})
    slices = [
        (int(attrs["starts"][0]), int(attrs["ends"][0]))
        for node in model.graph.node
        if node.op_type == "Slice" and list(node.input[:1]) == ["vector_observation"]
        for attrs in [{a.name: list(onnx.helper.get_attribute_value(a)) for a in node.attribute}]
        if attrs.get("axes", [1]) == [1] and len(attrs.get("starts", [])) == 1
    ]
    outputs = [o.name for o in model.graph.output]
    legacy = "vector_observation" in inputs or not any(o.startswith("deterministic_") for o in outputs)
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer}
    return OnnxInterface(path, inputs, outputs, sorted(set(slices)), legacy, weights)


def onnx_input_shapes(interface: OnnxInterface, seen: Optional[dict] = None) -> Optional[list]:
    """Per-input shapes (without the batch) in input order, from an ONNX interface; images as
    [C, H, W]. `seen` (input index -> InputSpec, from the checkpoint) places a 1.x file's inputs."""
    if interface.legacy_inputs:
        return legacy_input_shapes(interface, seen or {})
    obs = sorted((int(n[4:]), shape[1:]) for n, shape in interface.inputs.items() if re.fullmatch(r"obs_\d+", n))
    if not obs or [i for i, _ in obs] != list(range(len(obs))) or any(None in s for _, s in obs):
        return None
    return [tuple(s) for _, s in obs]


def legacy_input_shapes(interface: OnnxInterface, seen: dict) -> Optional[list]:
    """A 1.x file (ML-Agents' serializer before obs_N): every vector sensor concatenated in `vector_observation` (the
    graph slices it), the k-th image `visual_observation_k`, a buffer sensor `obs_i` at its own index i. The images go
    where the checkpoint has its image encoders (else after the vectors). Its serializer wrote images [C, H, W]; a file
    whose image is [H, W, C] by the checkpoint's channel count is read as such (MLAgentsOnnx.feed transposes)."""
    names = interface.inputs
    vectors = []
    if "vector_observation" in names:
        width = names["vector_observation"][1:]
        if None in width or len(width) != 1:
            return None
        vectors = (
            [(end - start,) for start, end in interface.vector_slices]
            if interface.vector_slices
            else [tuple(width)]
            if width[0]
            else []
        )
    images = [
        s[1:]
        for _, s in sorted(
            (int(n.rsplit("_", 1)[1]), s) for n, s in names.items() if re.fullmatch(r"visual_observation_\d+", n)
        )
    ]
    entities = {int(n[4:]): s[1:] for n, s in names.items() if re.fullmatch(r"obs_\d+", n)}
    if any(len(s) != 3 or None in s for s in images) or any(len(s) != 2 or None in s for s in entities.values()):
        return None
    total = len(vectors) + len(images) + len(entities)
    if any(i >= total for i in entities):
        return None
    image_at = [i for i in range(total) if i in seen and seen[i].kind == "visual" and i not in entities]
    if len(image_at) != len(images):
        image_at = [i for i in range(total) if i not in entities][len(vectors) :]
    out, vectors, images = [], iter(vectors), iter(images)
    for i in range(total):
        if i in entities:
            out.append(tuple(entities[i]))
        elif i in image_at:
            a, b, c = next(images)
            channels = seen[i].shape[0] if i in seen and seen[i].kind == "visual" else None
            out.append((c, a, b) if channels is not None and a != channels and c == channels else (a, b, c))
        else:
            out.append(next(vectors))
    return out


def check_onnx_shapes(shapes: list, path: Path) -> None:
    """Refuse input sizes that no ML-Agents sensor has (before anything is allocated for them): a size below 1 (an empty
    vector_observation slice, a negative dimension), or more than MAX_ENTITIES entities in a buffer sensor."""
    for i, dims in enumerate(shapes):
        problem = (
            "a size below 1"
            if any(d < 1 for d in dims)
            else f"more than {MAX_ENTITIES} entities"
            if len(dims) == 2 and dims[0] > MAX_ENTITIES
            else None
        )
        if problem:
            raise UsageError(
                f"{short_path(path)}: input {i} is declared {list(dims)}, {problem}; not a usable ML-Agents policy ONNX"
            )


def onnx_shapes_agree(shapes: list, seen: dict) -> bool:
    """Whether the ONNX's inputs can be this checkpoint's: same count reach, same kinds and sizes."""
    if seen and max(seen) >= len(shapes):
        return False
    for i, spec in seen.items():
        dims = tuple(shapes[i])
        if spec.kind == "vector" and dims != spec.shape:
            return False
        if spec.kind == "visual" and (
            len(dims) != 3
            or (spec.shape[0] is not None and dims[0] != spec.shape[0])
            or not all(isinstance(d, int) and d > 0 for d in dims)
        ):
            return False
        if spec.kind == "entities" and (len(dims) != 2 or dims[1] != spec.shape[1]):
            return False
    return all(len(s) == 1 for i, s in enumerate(shapes) if i not in seen)


ONNX_ONLY_SOURCE = "settings and weights from the ONNX (no checkpoint)"


ONNX_PLUMBING = {
    "Identity",
    "Cast",
    "Constant",
    "Shape",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Flatten",
    "Reshape",
    "Concat",
    "Slice",
    "Transpose",
}  # moves data about (exporters differ); the weights' shapes check it


ONNX_FOLD = {
    "Identity": lambda x: x,
    "Sqrt": np.sqrt,
    "Div": np.divide,
    "Mul": np.multiply,
    "Add": np.add,
    "Sub": np.subtract,
}  # constant subgraphs (an unfolded normaliser: sqrt(running_variance / steps))


SETTINGS_KEYS = (
    "version_number",
    "memory_size_vector",
    "is_continuous_int_deprecated",
    "continuous_act_size_vector",
    "discrete_act_size_vector",
    "act_size_vector_deprecated",
)  # derived from the settings, not weights


def _onnx_attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@dataclass
class WeightNode:
    """A node that holds weights, in the form torch's modules keep them: linear (weight [out, in],
    bias), conv (weight, bias), lstm (weight_ih, weight_hh, bias_ih, bias_hh in torch's gate
    order), or '<Op><slot>' for an elementwise op with a weight operand (Sub1: the running mean)."""

    kind: str
    values: tuple
    node: object
    deps: frozenset
    output: str

    @property
    def signature(self) -> tuple:
        return self.kind, tuple(v.shape for v in self.values)


class OnnxGraph:
    """An ONNX graph read as data: its constants (initializers, Constant nodes, and what folds from
    them), who produces and who consumes each tensor, and which sensors each tensor depends on."""

    def __init__(self, model, name: str):
        from onnx import numpy_helper

        self.name, self.nodes = name, []
        self.consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.inputs = _graph_inputs(model, self.consts)
        self.outputs = [o.name for o in model.graph.output]
        self.producer, self.consumers, alias, seen = {}, {}, {}, {}
        scalar = lambda name: float(self.consts[name]) if name in self.consts and self.consts[name].size == 1 else None
        minus = {}  # x - c, for ML-Agents' attention's "key -= 1; key += 1" (a Barracuda work-around): x again
        zeros = (
            set()
        )  # x * 0, for its log_sigma "mu * 0 + log_sigma" (the same, to the batch): log_sigma, as torch 1.7 wrote it
        written = {i.name for i in model.graph.input} | set(self.consts) | {""}
        for original in model.graph.node:  # Identity and Cast looked through, a repeated computation read once
            unread = [i for i in original.input if i not in written]  # (so that no walk of the graph can loop)
            twice = [o for o in original.output if o in written]
            if unread or twice:
                raise self.refuse(
                    original,
                    f"reads '{unread[0]}', which no node before it writes (a cycle, or nodes out of order)"
                    if unread
                    else f"writes '{twice[0]}' a second time",
                )
            written.update(original.output)
            ins = [alias.get(i, i) for i in original.input]
            if original.op_type == "Constant" and "value" in _onnx_attrs(original):
                self.consts[original.output[0]] = numpy_helper.to_array(_onnx_attrs(original)["value"])
            if original.op_type in ("Identity", "Cast") and len(ins) == 1 and original.output[0] not in self.outputs:
                alias[original.output[0]] = ins[0]
                continue
            if original.op_type == "Sub" and len(ins) == 2 and scalar(ins[1]) is not None:
                minus[original.output[0]] = (ins[0], scalar(ins[1]))
            if original.op_type == "Add" and len(ins) == 2 and ins[0] in minus and minus[ins[0]][1] == scalar(ins[1]):
                alias[original.output[0]] = minus[ins[0]][0]
                continue
            if original.op_type == "Mul" and len(ins) == 2 and scalar(ins[1]) == 0.0:
                zeros.add(original.output[0])
            if original.op_type == "Add" and len(ins) == 2 and ins[0] in zeros and self.weight(ins[1]):
                alias[original.output[0]] = ins[1]
                continue
            key = (original.op_type, tuple(ins), repr(sorted(_onnx_attrs(original).items())))
            if (
                key in seen
                and original.op_type not in ("RandomNormalLike", "Multinomial")
                and not set(original.output) & set(self.outputs)
            ):
                alias.update(zip(original.output, seen[key].output))
                continue
            node = type(original)()
            node.CopyFrom(original)
            del node.input[:]
            node.input.extend(ins)
            seen[key] = node
            self.nodes.append(node)
        for node in self.nodes:
            self.producer.update({name: node for name in node.output})
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
            if node.op_type in ONNX_FOLD and node.input and all(i in self.consts for i in node.input):
                with np.errstate(all="ignore"):
                    self.consts[node.output[0]] = np.asarray(
                        ONNX_FOLD[node.op_type](*(self.consts[i] for i in node.input))
                    )
            elif node.op_type == "Transpose" and node.input[0] in self.consts:
                self.consts[node.output[0]] = np.transpose(self.consts[node.input[0]], _onnx_attrs(node).get("perm"))

    def refuse(self, node, problem: str) -> UsageError:
        label = f"node '{node.name or node.output[0]}' ({node.op_type})" if node is not None else "the graph"
        return UsageError(f"{self.name}: {label} {problem}; not an ML-Agents policy this program can rebuild exactly")

    def weight(self, name: str) -> bool:
        value = self.consts.get(name)
        return value is not None and value.dtype.kind == "f" and value.ndim >= 1

    def data_inputs(self, node) -> list:
        return [i for i in node.input if i and i not in self.consts]

    def dependencies(self, sources: dict) -> dict:
        """tensor -> the sources (sensor index, 'action_masks', 'recurrent_in') it depends on."""
        deps = {name: frozenset([key]) for name, key in sources.items()}
        for node in self.nodes:
            found = frozenset().union(*(deps.get(i, frozenset()) for i in node.input))
            for name in node.output:
                deps.setdefault(name, found)
        return deps

    def weight_nodes(self, deps: dict) -> list:
        out, self.absorbed = [], set()  # absorbed: a MatMul's bias Add, part of its linear layer
        for node in self.nodes:
            op, ins, a = node.op_type, list(node.input), _onnx_attrs(node)
            if id(node) in self.absorbed:
                continue
            if op == "Gemm" and len(ins) > 1 and self.weight(ins[1]):
                if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
                    raise self.refuse(node, f"has attributes {a}")
                w = self.consts[ins[1]] if a.get("transB", 0) else self.consts[ins[1]].T
                bias = (self.consts[ins[2]].reshape(-1),) if len(ins) > 2 and self.weight(ins[2]) else ()
                out.append(
                    WeightNode("linear", (w, *bias), node, deps.get(node.output[0], frozenset()), node.output[0])
                )
            elif op == "MatMul" and self.weight(ins[1]) and self.consts[ins[1]].ndim == 2:  # a 3-D input's Linear
                other = lambda add: add.input[add.input[0] == node.output[0]]
                adds = [
                    c
                    for c in self.consumers.get(node.output[0], [])
                    if c.op_type == "Add"
                    and len(c.input) == 2
                    and self.weight(other(c))
                    and self.consts[other(c)].ndim == 1
                ][:1]
                self.absorbed.update(id(c) for c in adds)
                output = adds[0].output[0] if adds else node.output[0]
                out.append(
                    WeightNode(
                        "linear",
                        (self.consts[ins[1]].T, *(self.consts[other(c)] for c in adds)),
                        node,
                        deps.get(output, frozenset()),
                        output,
                    )
                )
            elif op == "Conv" and self.weight(ins[1]):
                bias = (self.consts[ins[2]],) if len(ins) > 2 and self.weight(ins[2]) else ()
                kind = "conv" + repr(
                    (a.get("strides"), a.get("pads", [0] * 4), a.get("group", 1), a.get("dilations", [1, 1]))
                )
                out.append(
                    WeightNode(
                        kind, (self.consts[ins[1]], *bias), node, deps.get(node.output[0], frozenset()), node.output[0]
                    )
                )
            elif op == "LSTM":
                out.append(self.lstm_node(node, deps))
            elif op == "Exp" and len(ins) == 1 and self.weight(ins[0]):  # exp(log_sigma), used where mu is
                used = frozenset().union(
                    *(deps.get(i, frozenset()) for c in self.consumers.get(node.output[0], []) for i in c.input)
                )
                out.append(WeightNode("Exp0", (self.consts[ins[0]],), node, used, node.output[0]))
            elif op not in ONNX_PLUMBING and any(self.weight(i) for i in ins):
                slots = [k for k, i in enumerate(ins) if self.weight(i)]
                if len(slots) != 1 or len(ins) != 2:
                    raise self.refuse(node, "holds weights in a form ML-Agents does not write")
                out.append(
                    WeightNode(
                        f"{op}{slots[0]}",
                        (self.consts[ins[slots[0]]],),
                        node,
                        deps.get(node.output[0], frozenset()),
                        node.output[0],
                    )
                )
        return out

    def lstm_node(self, node, deps: dict) -> WeightNode:
        """ONNX's W [1, 4h, in], R [1, 4h, h], B [1, 8h] (gates i, o, f, c) as torch's weight_ih_l0,
        weight_hh_l0, bias_ih_l0, bias_hh_l0 (gates i, f, c, o)."""
        ins, a = list(node.input) + [""] * 8, _onnx_attrs(node)
        if (
            not all(map(self.weight, ins[1:4]))
            or ins[4]
            or set(a) - {"hidden_size", "direction"}
            or a.get("direction", b"forward") not in (b"forward", "forward")
        ):
            raise self.refuse(node, "is not the one-layer forward LSTM with biases ML-Agents writes")
        order = lambda x: np.concatenate([np.split(x, 4)[i] for i in (0, 2, 3, 1)])
        w, r, b = self.consts[ins[1]][0], self.consts[ins[2]][0], self.consts[ins[3]][0]
        half = b.shape[0] // 2
        return WeightNode(
            "lstm",
            (order(w), order(r), order(b[:half]), order(b[half:])),
            node,
            deps.get(node.output[0], frozenset()),
            node.output[0],
        )

    def feeds(self, outputs: set) -> dict:
        """tensor -> {graph output (of `outputs`): the Concat slots on its way there (the least)}: what a tensor
        feeds, whatever the order of the nodes (a branch's logits: its slot in the actions' Concat)."""
        slots = {name: {name: ()} for name in self.outputs if name in outputs}
        for node in reversed(self.nodes):
            below = {}
            for name in node.output:
                for output, path in slots.get(name, {}).items():
                    below[output] = min(path, below.get(output, path))
            for k, name in enumerate(node.input):
                mine = slots.setdefault(name, {})
                for output, path in below.items():
                    path = ((k,) if node.op_type == "Concat" else ()) + path
                    mine[output] = min(path, mine.get(output, path))
        return slots

    def op_signatures(self, anchors: list, weights: dict) -> dict:
        """How many of each computing operator (with its attributes and scalar constants) the
        anchors depend on, and a node of each: two graphs computing the same thing agree."""
        seen, stack, count, first = set(), list(anchors), {}, {}
        while stack:
            node = self.producer.get(stack.pop())
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            stack.extend(i for i in node.input if i)
            if node.op_type in ONNX_PLUMBING or id(node) in self.absorbed:
                continue
            if id(node) in weights:
                key = (weights[id(node)].kind,)
            else:
                scalars = tuple(
                    float(np.round(self.consts[i], 6))
                    for i in node.input
                    if i in self.consts and self.consts[i].ndim == 0 and self.consts[i].dtype.kind == "f"
                )
                attrs = tuple(
                    sorted(
                        (k, tuple(v) if isinstance(v, list) else v)
                        for k, v in _onnx_attrs(node).items()
                        if not hasattr(v, "dims")
                    )
                )
                key = (node.op_type, attrs, scalars)
            count[key] = count.get(key, 0) + 1
            first.setdefault(key, node)
        return count, first


@dataclass
class OnnxSensor:
    """One sensor as an ML-Agents ONNX feeds it: the tensor its processor reads (a graph input, a
    slice of a 1.x file's vector_observation, a 1.x channels-last image after its Transpose)."""

    tensor: str
    kind: str  # vector | visual | entities
    shape: tuple  # without the batch; images (C, H, W)
    feed: str  # the graph input that carries it


def onnx_slices(g: OnnxGraph, name: str, width: int) -> list:
    """(start, end, output) of the Slice nodes that cut input `name` along its features, which
    must be consecutive parts of all of it (1.x sensors of vector_observation, mask branches)."""
    cuts = sorted(
        (a["starts"][0], min(a["ends"][0], width or 0), n.output[0])
        for n in g.consumers.get(name, [])
        for a in [_onnx_attrs(n)]
        if n.op_type == "Slice" and a.get("axes", [0]) in ([1], [-1]) and len(a.get("starts", [])) == 1
    )
    if cuts and ([c[0] for c in cuts] != [0] + [c[1] for c in cuts[:-1]] or cuts[-1][1] != width):
        raise g.refuse(None, f"slices {name} as {[c[:2] for c in cuts]}, not into consecutive parts")
    return cuts


def onnx_sensors(g: OnnxGraph) -> list:
    """The sensors in ML-Agents' processor order: obs_0..obs_k (2.x and 1.1.0 files); for 1.x
    files the slices of vector_observation, the visual_observation_k and buffer obs_i, ordered as
    the observation encoder concatenates them (a buffer sensor sits at its own index i)."""
    kinds = {1: "vector", 2: "entities", 3: "visual"}
    entities, others = {}, []
    for name, dims in g.inputs.items():
        if name in ("action_masks", "recurrent_in"):
            continue
        shape = tuple(dims[1:])
        if None in shape or not shape or len(shape) not in kinds:
            raise g.refuse(None, f"has input {name} of shape {list(dims)}, which no ML-Agents sensor has")
        if re.fullmatch(r"obs_\d+", name):
            entities[int(name[4:])] = OnnxSensor(name, kinds[len(shape)], shape, name)
        elif name == "vector_observation" and len(shape) == 1:
            cuts = onnx_slices(g, name, shape[0]) or ([(0, shape[0], name)] if shape[0] else [])
            others += [OnnxSensor(t, "vector", (end - start,), name) for start, end, t in cuts]
        elif re.fullmatch(r"visual_observation_\d+", name) and len(shape) == 3:
            users = g.consumers.get(name, [])
            if (
                len(users) == 1
                and users[0].op_type == "Transpose"
                and list(_onnx_attrs(users[0]).get("perm", [])) == [0, 3, 1, 2]
            ):
                others.append(OnnxSensor(users[0].output[0], "visual", (shape[2], shape[0], shape[1]), name))
            else:
                others.append(OnnxSensor(name, "visual", shape, name))
        else:
            raise g.refuse(None, f"has input {name}, which no ML-Agents serializer writes")
    if others and entities and any(s.kind != "entities" for s in entities.values()):
        raise g.refuse(None, "mixes obs_N inputs with vector_observation / visual_observation_N")
    if len(others) > 1:  # 1.x: the encoder's Concat says the sensor order
        deps = g.dependencies({s.tensor: i for i, s in enumerate(others)})
        concat = next(
            (
                n
                for n in g.nodes
                if n.op_type == "Concat"
                and sorted(i for t in g.data_inputs(n) for i in deps.get(t, ())) == list(range(len(others)))
                and all(len(deps.get(t, ())) == 1 for t in g.data_inputs(n))
            ),
            None,
        )
        if concat is None:
            raise g.refuse(None, "has no Concat of its sensors' encodings")
        others = [others[next(iter(deps[t]))] for t in g.data_inputs(concat)]
    total = len(entities) + len(others)
    if any(i >= total for i in entities):
        raise g.refuse(None, f"has inputs {sorted(f'obs_{i}' for i in entities)} with gaps in their numbering")
    rest = iter(others)
    return [entities[i] if i in entities else next(rest) for i in range(total)]


def onnx_settings(g: OnnxGraph, sensors: list, goal_input: GoalInput) -> PolicySettings:
    """ML-Agents' settings from the graph's structure (the template's export must then match it)."""
    deps = g.dependencies({s.tensor: i for i, s in enumerate(sensors)})
    weights = g.weight_nodes(deps)
    linears = [w for w in weights if w.kind == "linear"]
    if not linears:
        raise g.refuse(None, "has no Linear layer")
    normalize = any(
        c.op_type == "Sub" and len(c.input) == 2 and g.weight(c.input[1])
        for s in sensors
        if s.kind == "vector"
        for c in g.consumers.get(s.tensor, [])
    )
    inputs = []
    for i, s in enumerate(sensors):
        encoder = None
        if s.kind == "visual":
            own = [w for w in weights if w.kind.startswith("conv") and w.deps == {i}]
            kernels = list(dict.fromkeys((w.values[0].shape[0], w.values[0].shape[2]) for w in own))
            pooled = any(n.op_type == "MaxPool" and deps.get(n.output[0]) == {i} for n in g.nodes)
            encoder = encoder_from_kernels(kernels, pooled)
            if encoder is None:
                raise g.refuse(
                    own[0].node, f"starts convolutions {kernels} that match none of ML-Agents' visual encoders"
                )
        inputs.append(InputSpec(f"obs_{i}", s.kind, s.shape, normalize and s.kind == "vector", encoder))
    memory = int(g.inputs["recurrent_in"][-1] or 0) if "recurrent_in" in g.inputs else 0
    shape_out = lambda name: g.consts.get(
        g.producer[name].input[0] if name in g.producer and g.producer[name].op_type == "Identity" else name
    )
    continuous = shape_out("continuous_action_output_shape") if "continuous_action_output_shape" in g.outputs else None
    continuous = int(continuous.reshape(-1)[0]) if continuous is not None and continuous.size == 1 else 0
    branches = [
        end - start for start, end, _ in onnx_slices(g, "action_masks", (g.inputs.get("action_masks") or [0])[-1])
    ]
    sac = any(n.op_type == "Tanh" for n in g.nodes)
    layers, hyper, hidden = _onnx_body(g, linears, weights, memory)
    _mark_goal_inputs(g, deps, hyper, goal_input, inputs)
    return PolicySettings(
        inputs,
        int(hidden),
        layers,
        normalize,
        continuous,
        branches,
        memory,
        sac,
        sac,
        hyper is not None,
        [],
        "sac" if sac else None,
        ONNX_ONLY_SOURCE,
    )


def _onnx_body(g: OnnxGraph, linears: list, weights: list, memory: int) -> tuple:
    """(layers, hyper, hidden): the body, walked from the last action head back to the encoders' Concat; hyper is
    the MatMul that applies a hypernetwork's generated weights, None for a plain body."""
    head = linears[-1]
    layers, hyper, lstm, tensor = 0, None, None, g.data_inputs(head.node)[0]
    by_node = {id(w.node): w for w in linears}
    while tensor in g.producer:
        node = g.producer[tensor]
        data = g.data_inputs(node)
        if id(node) in by_node:
            layers += 1
        elif node.op_type == "MatMul" and len(data) == 2:  # x @ the weights a hypernetwork generated
            if layers:
                raise g.refuse(node, "is a generated (hypernetwork) layer before the body's last layer")
            hyper, layers = node, 1
        elif node.op_type == "LSTM":
            lstm = node
        elif not (
            node.op_type in ("Mul", "Sigmoid", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Add", "Identity")
            or node.op_type == "Concat"
            and len(data) == 1
        ):
            break
        tensor = data[0]
    if not layers:
        raise g.refuse(head.node, "is an action head with no body layer before it")
    hidden = head.values[0].shape[1]
    if memory or lstm is not None:
        cell = next((w for w in weights if w.node is lstm), None)
        if cell is None or cell.values[1].shape[1] * 2 != memory:
            raise g.refuse(lstm, f"is not an LSTM over a memory of {memory}")
        hidden = cell.values[0].shape[1]
    return layers, hyper, hidden


def _mark_goal_inputs(g: OnnxGraph, deps: dict, hyper, goal_input: GoalInput, inputs: list) -> None:
    """The inputs a hypernetwork reads marked as its goal signal; --goal-input must name those very inputs."""
    if hyper is not None:
        goal = sorted(i for i in deps.get(hyper.input[1], ()) if isinstance(i, int))
        if goal_input is not None and goal_indices(goal_input) != tuple(goal):
            raise UsageError(
                f"--goal-input {','.join(map(str, goal_indices(goal_input)))}: in {g.name} the "
                f"hypernetwork reads {', '.join(f'input {i}' for i in goal) or 'no input'}"
            )
        for i in goal:
            inputs[i].goal = True
    elif goal_input is not None:
        raise UsageError(
            f"--goal-input {','.join(map(str, goal_indices(goal_input)))}: {g.name} has no "
            f"goal-conditioned (hypernetwork) body"
        )


def file_input_groups(g: OnnxGraph, sensors: list, settings: PolicySettings) -> tuple:
    """(the file's inputs in its order, the sensors each carries): a 1.x file's vector sensors all arrive in
    vector_observation, in the order of their slices; every other input carries one sensor."""
    if settings.hyper:
        raise g.refuse(None, "is a 1.x file with a goal signal, which ML-Agents' 1.x serializer never wrote")
    feeds = list(dict.fromkeys(s.feed for s in sorted(sensors, key=lambda s: list(g.inputs).index(s.feed))))
    vectors = sorted(
        (i for i, s in enumerate(sensors) if s.feed == "vector_observation"),
        key=lambda i: (
            _onnx_attrs(g.producer[sensors[i].tensor]).get("starts", [0])[0] if sensors[i].tensor in g.producer else 0
        ),
    )
    groups = [
        vectors if feed == "vector_observation" else [next(i for i, s in enumerate(sensors) if s.feed == feed)]
        for feed in feeds
    ]
    return feeds, groups


def file_named_settings(g: OnnxGraph, sensors: list, settings: PolicySettings) -> PolicySettings:
    """The settings with the file's own inputs (a 1.x file: vector_observation, visual_observation_k as it lays them
    out); unchanged for a file whose inputs are its sensors (obs_0..obs_k)."""
    if all(s.feed == s.tensor == spec.name for s, spec in zip(sensors, settings.inputs)):
        return settings
    old, inputs = settings.inputs, []
    for feed, group in zip(*file_input_groups(g, sensors, settings)):
        spec = old[group[0]]
        if feed == "vector_observation":
            spec = InputSpec(feed, "vector", (sum(old[i].shape[0] for i in group),), settings.normalize)
        else:
            last = spec.kind == "visual" and sensors[group[0]].tensor != feed  # read through a Transpose
            spec = replace(spec, name=feed, shape=tuple(g.inputs[feed][1:]) if last else spec.shape, channels_last=last)
        inputs.append(spec)
    return replace(settings, inputs=inputs)
