"""ML-Agents' modules with the weights of an ML-Agents ONNX alone (no checkpoint; docs/policies.md tells how
they are paired), checked against the file by a probe run before it is used."""

import math
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..core.errors import NotThisPolicy, UsageError
from ..core.onnx_graph import SETTINGS_KEYS, OnnxGraph, file_input_groups, file_named_settings
from ..core.spec import GoalInput, PolicySettings, deterministic_continuous
from ..model.export import export_mlagents_onnx
from ..model.networks import SimpleActor, branch_argmax
from .checkpoint import LoadedCheckpoint, build_actor, check_image_sides, check_state_dict
from .onnx_file import MLAgentsOnnx, graph_errors, read_policy_graph

__all__ = [
    "onnx_state_dict",
    "file_named_inputs",
    "load_onnx_alone",
    "PROBE_SCALES",
    "PROBE_TOL",
    "probe_inputs",
    "check_rebuilt",
]


def _tagged_template(g: OnnxGraph, settings: PolicySettings) -> tuple:
    """(template, canonical, tags): SimpleActor(settings), each parameter given its own random values (tags, by key),
    and the first key of each tensor (by data pointer) that several keys share."""
    with torch.device("meta"):
        wanted = sum(v.numel() for v in SimpleActor(settings).state_dict().values())
    if wanted > 2 * sum(v.size for v in g.consts.values()) + 4096:
        raise g.refuse(None, f"declares inputs that need {wanted:,} weights, more than the file holds")
    template = SimpleActor(settings).eval()
    generator, canonical, tags = torch.Generator().manual_seed(0), {}, {}
    with torch.no_grad():
        for key, value in template.state_dict(keep_vars=True).items():
            first = canonical.setdefault(value.data_ptr(), key)  # processors.<i> is observation_encoder.processors.<i>
            if first == key and key.rsplit(".", 1)[-1] not in SETTINGS_KEYS and value.is_floating_point():
                value.copy_(torch.rand(value.shape, generator=generator) + 0.5)
                tags[key] = value.detach().numpy().copy()
    return template, canonical, tags


def _which_parameter(g: OnnxGraph, tags: dict, value: np.ndarray) -> tuple:
    """(parameter, True when the graph holds sqrt(running_variance / normalization_steps), steps 1 here)."""
    for key, tag in tags.items():
        if tag.shape == value.shape and np.array_equal(tag, value):
            return key, False
    for key, tag in tags.items():
        if (
            key.endswith("running_variance")
            and tag.shape == value.shape
            and np.allclose(np.sqrt(tag), value, rtol=1e-6, atol=0)
        ):
            return key, True
    raise g.refuse(None, "cannot be paired with ML-Agents' modules (a template weight is unaccounted for)")


def _weight_groups(t: OnnxGraph, g: OnnxGraph, t_weights: list, f_weights: list) -> dict:
    """(signature, deps) -> (template's nodes, file's nodes), each side in the order its nodes pair in."""
    groups = {}
    for side, nodes in ((0, t_weights), (1, f_weights)):
        for w in nodes:
            groups.setdefault((w.signature, w.deps), ([], []))[side].append(w)
    common = set(t.outputs) & set(g.outputs)
    t_feeds, g_feeds = t.feeds(common), g.feeds(common)
    for (signature, _), (mine, theirs) in groups.items():
        if len(theirs) > len(mine):
            raise g.refuse(
                theirs[len(mine)].node,
                f"holds weights {[list(s) for s in signature[1]]} that no ML-Agents module of these settings has there",
            )
        keys = [
            [tuple(sorted(feeds.get(w.output, {}).items())) for w in side]
            for feeds, side in ((t_feeds, mine), (g_feeds, theirs))
        ]
        if len(set(keys[0])) == len(keys[0]) and sorted(keys[0]) == sorted(keys[1]):  # same-shaped heads: paired by
            for side, key in zip((mine, theirs), keys):  # what they feed, else in node
                side[:] = [w for _, w in sorted(zip(key, side), key=lambda kw: kw[0])]  # order (load checks both)
    return groups


def _paired_values(g: OnnxGraph, groups: dict, tags: dict) -> tuple:
    """(found, anchors): the file's value of each parameter, and the outputs of the action model's weight nodes
    (template's, file's)."""
    found, anchors = {}, ([], [])
    for (signature, _), (mine, theirs) in groups.items():
        if len(mine) > len(theirs):
            key = _which_parameter(g, tags, mine[len(theirs)].values[0])[0]
            raise g.refuse(None, f"has no node for ML-Agents' {key} {list(tags[key].shape)}")
        for a, b in zip(mine, theirs):
            for tag, value in zip(a.values, b.values):
                key, rooted = _which_parameter(g, tags, tag)
                if not np.isfinite(value).all():
                    raise g.refuse(b.node, "holds NaN or infinite weights")
                value = np.square(value.astype(np.float64)).astype(np.float32) if rooted else value.astype(np.float32)
                if key in found and not np.array_equal(found[key], value):
                    raise g.refuse(b.node, f"gives {key} a second, different value")
                found[key] = value
                if key.startswith("action_model."):
                    anchors[0].append(a.output), anchors[1].append(b.output)
    return found, anchors


def _check_same_operators(t: OnnxGraph, g: OnnxGraph, anchors: tuple, t_weights: list, f_weights: list) -> None:
    """Refused unless the file computes what the template does between its weights and the actions (and memory)."""
    for graph, names in zip((t, g), anchors):
        names += [n.output[0] for n in graph.nodes if n.op_type in ("Softmax", "LSTM")] + [
            n.output[-1] for n in graph.nodes if n.op_type == "LSTM"
        ]
    (mine, _), (theirs, nodes) = [
        graph.op_signatures(names, {id(w.node): w for w in weights})
        for graph, names, weights in ((t, anchors[0], t_weights), (g, anchors[1], f_weights))
    ]
    if mine != theirs:
        extra = next((k for k in theirs if theirs[k] > mine.get(k, 0)), None)
        missing = next((k for k in mine if mine[k] > theirs.get(k, 0)), None)
        label = lambda k: (
            k
            and k[0] + (f"({', '.join([f'{a}={v}' for a, v in k[1]] + [str(x) for x in k[2]])})" if len(k) > 1 else "")
        )
        raise g.refuse(
            nodes.get(extra),
            f"computes {label(extra) or 'less'} where ML-Agents' modules compute {label(missing) or 'nothing'}",
        )


def onnx_state_dict(g: OnnxGraph, sensors: list, settings: PolicySettings) -> dict:
    """The file's weights as the state dict of SimpleActor(settings). A template of these modules, each
    parameter given its own random values, is exported as ML-Agents exports it; both graphs' weight-bearing
    nodes are paired by kind, shape and the sensors they depend on, and the template's values say which
    parameter each holds. Every other operator on the way to the actions must be the template's too."""
    import onnx

    template, canonical, tags = _tagged_template(g, settings)
    t = OnnxGraph(onnx.load_from_string(export_mlagents_onnx(template)), "template")
    extra = {"action_masks": "action_masks", "recurrent_in": "recurrent_in"}
    t_weights = t.weight_nodes(t.dependencies({**{f"obs_{i}": i for i in range(len(sensors))}, **extra}))
    f_weights = g.weight_nodes(g.dependencies({**{s.tensor: i for i, s in enumerate(sensors)}, **extra}))
    groups = _weight_groups(t, g, t_weights, f_weights)
    found, anchors = _paired_values(g, groups, tags)
    _check_same_operators(t, g, anchors, t_weights, f_weights)
    missing = [key for key in tags if key not in found]
    if missing:
        raise g.refuse(None, f"has no weights for ML-Agents' {missing[0]}")
    state = {}
    for key, value in template.state_dict().items():
        first = canonical[value.data_ptr()] if value.numel() else key
        state[key] = torch.from_numpy(found[first].copy()) if first in found else value.clone()
    return state


def file_named_inputs(g: OnnxGraph, sensors: list, settings: PolicySettings, state: dict) -> tuple:
    """The policy takes the file's own inputs. A 1.x file's vector sensors arrive concatenated in
    vector_observation: one input whose normaliser is theirs side by side (it works elementwise),
    the body's first layer taking its columns in the file's order (the same sums)."""
    if all(s.feed == s.tensor == spec.name for s, spec in zip(sensors, settings.inputs)):
        return settings, state
    feeds, groups = file_input_groups(g, sensors, settings)
    old = settings.inputs
    width = lambda i: (
        old[i].shape[0] if old[i].kind == "vector" else settings.hidden_units if old[i].kind == "visual" else 0
    )
    starts = np.cumsum([0] + [width(i) for i in range(len(old))])
    columns = [c for group in groups for i in group for c in range(starts[i], starts[i + 1])]
    out = {}
    for k, (feed, group) in enumerate(zip(feeds, groups)):
        if feed == "vector_observation":
            if settings.normalize:
                for prefix in ("network_body.processors", "network_body.observation_encoder.processors"):
                    part = lambda name: torch.cat([state[f"{prefix}.{i}.normalizer.{name}"] for i in group])
                    out.update(
                        {
                            f"{prefix}.{k}.normalizer.running_mean": part("running_mean"),
                            f"{prefix}.{k}.normalizer.running_variance": part("running_variance"),
                            f"{prefix}.{k}.normalizer.normalization_steps": torch.tensor(1),
                        }
                    )
        else:
            for key, value in state.items():
                m = re.match(r"^(network_body\.(?:observation_encoder\.)?processors)\.(\d+)\.(.+)$", key)
                if m and int(m.group(2)) == group[0]:
                    out[f"{m.group(1)}.{k}.{m.group(3)}"] = value
    inputs = file_named_settings(g, sensors, settings).inputs
    for key, value in state.items():
        if re.match(r"^network_body\.(?:observation_encoder\.)?processors\.", key):
            continue
        if key in (
            "network_body._body_endoder.seq_layers.0.weight",
            "network_body.observation_encoder.x_self_encoder.seq_layers.0.weight",
        ):
            value = value[:, columns + list(range(len(columns), value.shape[1]))]
        out[key] = value.contiguous()
    return replace(settings, inputs=inputs), out


def load_onnx_alone(path: Path, expect_sha256: Optional[str] = None, goal_input: GoalInput = None) -> LoadedCheckpoint:
    """A policy from its ML-Agents ONNX alone: ML-Agents' modules with the file's weights, built
    and loaded (strict) as a checkpoint's are."""
    t0 = time.perf_counter()
    sha, interface, g, sensors, settings = read_policy_graph(path, expect_sha256, goal_input, "; not rebuilt")
    with graph_errors(path, "; not rebuilt"):
        check_image_sides(settings, path, [s.feed for s in sensors])  # (before the template is exported)
        settings, state = file_named_inputs(g, sensors, settings, onnx_state_dict(g, sensors, settings))
    check_state_dict(state, lambda problem: UsageError(f"{path}: not a usable ML-Agents policy: {problem}"))
    actor = build_actor(settings, state, path)
    check_rebuilt(path, actor)
    return LoadedCheckpoint(path, settings, actor, interface, None, sha, time.perf_counter() - t0)


PROBE_SCALES = (
    1.0,
    3.0,
    10.0,
    100.0,
)  # a vector in its normaliser's deviations (past its clip of 5), an image's pixels


PROBE_TOL = 1e-4  # float32 noise, relative to max(1, |value|) and to the probe's scale


def probe_inputs(actor: SimpleActor, seed: int = 0) -> tuple:
    """(engine inputs, each row's scale) that probe a rebuilt policy: rows in blocks of PROBE_SCALES, a vector about its
    normaliser's mean in its deviations (or raw), images (in [-0.2, 1] times the scale) and entity buffers (absent
    entities zero) likewise, random masks (one action allowed per branch at least) and memories; 64 rows at most."""
    s, rng = actor.settings, np.random.RandomState(seed)
    rows = int(np.clip((1 << 18) // max(1, sum(math.prod(spec.shape) for spec in s.inputs)), 4, 64))  # (images: fewer)
    scale = np.repeat(PROBE_SCALES, -(-rows // len(PROBE_SCALES)))[:rows]
    flat = []
    for spec, processor in zip(s.inputs, actor.network_body.processors):
        lead = scale.reshape(-1, *[1] * len(spec.shape))
        x = (
            rng.uniform(-0.2, 1.0, (rows, *spec.shape)) if spec.kind == "visual" else rng.randn(rows, *spec.shape)
        ) * lead
        norm = getattr(processor, "normalizer", None)
        if norm is not None:
            x = norm.running_mean.numpy() + x * np.sqrt(norm.running_variance.numpy() / float(norm.normalization_steps))
        if spec.kind == "entities":
            x[np.arange(spec.shape[0])[None, :] >= rng.randint(0, spec.shape[0] + 1, (rows, 1))] = 0.0
        flat.append(np.ascontiguousarray(x, np.float32))
    if s.discrete_branches:
        masks = (rng.rand(rows, sum(s.discrete_branches)) < 0.6).astype(np.float32)
        for end, size in zip(np.cumsum(s.discrete_branches), s.discrete_branches):
            masks[np.arange(rows), end - size + rng.randint(size, size=rows)] = 1.0
        flat.append(masks)
    if s.memory_size:
        half = s.memory_size // 2
        memory = np.concatenate([np.tanh(rng.randn(rows, half)), 2 * rng.randn(rows, half)], axis=1)
        flat.append(memory[:, None, :].astype(np.float32))
    return flat, scale


def check_rebuilt(path: Path, actor: SimpleActor) -> None:
    """A policy rebuilt from a file must compute what the file computes: the file itself, run by onnxruntime on
    probe_inputs, against the rebuilt modules' deterministic actions and next memory. A UsageError when they differ
    beyond float32 noise (a discrete action: unless the two actions' logits are equal within it)."""
    s, (flat, scale) = actor.settings, probe_inputs(actor)
    n, rows, problems = len(s.inputs), len(flat[0]), []
    try:
        theirs = MLAgentsOnnx(path, s, threads=1).deterministic(flat)
    except NotThisPolicy as exc:
        raise UsageError(f"{path}: its graph {exc}; not rebuilt")

    def compare(what: str, ours: np.ndarray, want: np.ndarray):
        err = (np.abs(ours - want) / np.maximum(1.0, np.abs(want))).max(axis=1)
        bad = ~(err <= PROBE_TOL * scale)  # (NaN included)
        if bad.any():
            row = int(np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf), -1)))
            problems.append(f"{what} differ by up to {float(err[row]):.3g} (probe row {row} of {rows})")

    with torch.no_grad():
        t, model = [torch.from_numpy(x) for x in flat], actor.action_model
        encoding, memory = actor.network_body(t[:n], memories=t[-1] if s.memory_size else None)
        if s.continuous_size:
            mu = model._continuous_distribution(encoding)[0]
            compare(
                "the deterministic continuous actions",
                deterministic_continuous(mu, s.tanh_squash).numpy(),
                theirs["continuous_actions"],
            )
        if s.discrete_branches:
            ours, want = branch_argmax(model._discrete_distribution(encoding, t[n])).numpy(), theirs["discrete_actions"]
            logits = torch.cat([branch(encoding) for branch in model._discrete_distribution.branches], 1).numpy()
            logits[flat[n] == 0] = -np.inf  # (forbidden actions)
            start = np.cumsum([0] + s.discrete_branches[:-1])

            def tie(row, b) -> bool:  # the file's action allowed, its logit equal to ours within float32 noise
                size, w = s.discrete_branches[b], want[row, b]
                a, w = logits[row, start[b] + ours[row, b]], logits[row, start[b] + w] if 0 <= w < size else np.nan
                return abs(a - w) <= PROBE_TOL * scale[row] * max(1.0, abs(a))

            differ = [(row, b) for row, b in zip(*np.nonzero(ours != want)) if not tie(row, b)]
            if differ:
                (row, b), count = differ[0], len({row for row, _ in differ})
                problems.append(
                    f"the deterministic discrete actions differ in {count} of {rows} probe rows (row {row}, "
                    f"branch {b}: {ours[row, b]} here, {want[row, b]} in the file)"
                )
        if s.memory_size:
            compare("the next memories", memory.reshape(rows, -1).numpy(), theirs["memory"])
    if problems:
        raise UsageError(
            f"{path}: the policy rebuilt from its weights does not compute what the file computes: "
            f"{'; '.join(problems)}; refused"
        )
