"""The checkpoint reader: read (weights_only), validate, infer the settings (the ONNX or
configuration.yaml where the checkpoint is silent) and build the actor with one strict load."""

import errno
import itertools
import os
import pickle
import re
import warnings
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import torch

from ..core.errors import UsageError
from ..core.files import short_path
from ..core.onnx_graph import OnnxInterface, check_onnx_shapes, onnx_input_shapes, onnx_shapes_agree
from ..core.spec import ATTENTION_EMBEDDING, GoalInput, InputSpec, PolicySettings, goal_indices
from ..model.encoders import VISUAL_ENCODERS
from ..model.networks import SimpleActor

__all__ = [
    "read_checkpoint",
    "validate_tensors",
    "global_step",
    "ENCODER_KEYS",
    "PROCESSOR_KEY",
    "check_state_dict",
    "onnx_difference",
    "infer_settings",
    "visual_input_spec",
    "inputs_from_checkpoint",
    "pick_goal",
    "trainer_of",
    "check_image_sides",
    "build_actor",
    "LoadedCheckpoint",
    "policy_needs_onnx",
]


def read_checkpoint(path: Path) -> dict:
    """torch.load with weights_only=True: tensors and plain containers only, never code."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Zip checkpoints (every torch.save since 1.6, so every ML-Agents one) are memory-mapped:
            # no tensor data is read or allocated before validate_tensors has looked at it.
            mmap = zipfile.is_zipfile(path)
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError as exc:
                if not mmap or "mmap" not in str(exc).lower():
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)  # a file system without mmap
            size = os.stat(path).st_size
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not a checkpoint file")
    except OSError as exc:
        if exc.errno == errno.EINVAL and os.path.isfile(path):  # torch's reader on a file cut short (not a zip)
            raise UsageError(
                f"{path}: refused, nothing in it was run (not a PyTorch checkpoint file, or a damaged/truncated one); "
                f"expected an ML-Agents .pt written by mlagents-learn"
            )
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})")
    except (
        pickle.UnpicklingError,
        RuntimeError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        ImportError,
        IndexError,
        KeyError,
        UnicodeDecodeError,
        MemoryError,
        OverflowError,
    ) as exc:
        text = str(exc).strip()
        wants_code = re.search(r"(?:unsupported|Unsupported global:) GLOBAL ([\w.]+)", text)
        if wants_code:  # a pickle asking for code (e.g. GLOBAL posix.system): the refusal we want
            reason = f"it asks to import and call {wants_code.group(1)}, which could run code"
        elif text.startswith("Weights only load failed") or "central directory" in text or not text:
            reason = "not a PyTorch checkpoint file, or a damaged/truncated one"
        else:
            reason = text.splitlines()[0][:160]
        raise UsageError(
            f"{path}: refused, nothing in it was run ({reason}); expected an ML-Agents .pt written by mlagents-learn"
        )
    validate_tensors(obj, path, size)
    if not isinstance(obj, dict) or "Policy" not in obj or not isinstance(obj["Policy"], dict):
        raise UsageError(f"{path}: not an ML-Agents checkpoint (no 'Policy' state dict)")
    return obj


def validate_tensors(obj, path: Optional[Path] = None, max_storage_bytes: Optional[int] = None) -> None:
    """Refuse, before anything reads their data, tensors a trainer never writes: not dense
    (sparse, nested, quantized), not a plain dtype, not on the CPU, a storage larger than the
    file (`max_storage_bytes`), or more elements than their storage holds (stride-0 tricks that
    make 4 bytes look like 10^10 floats). Walks containers without recursion (any depth, cycles)."""
    plain = {
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
    }

    def bad(where: str, problem: str) -> UsageError:
        return UsageError(
            f"{short_path(path) + ': ' if path else ''}refused, nothing in it was run "
            f"(tensor {where} {problem}); expected an ML-Agents .pt written by mlagents-learn"
        )

    stack, seen, items = [("", obj)], set(), 0
    while stack:
        where, value = stack.pop()
        items += 1
        if items > 10_000_000:
            raise bad("", "in a structure of more than 10^7 items")
        if isinstance(value, torch.Tensor):
            where = repr(where[:80]) if where else "(top level)"
            if type(value) not in (torch.Tensor, torch.nn.Parameter):
                raise bad(where, f"is a {type(value).__name__}")
            if value.layout != torch.strided or value.is_nested:
                raise bad(where, f"is not dense ({str(value.layout).replace('torch.', '')})")
            if value.is_quantized or value.dtype not in plain:
                raise bad(where, f"has dtype {str(value.dtype).replace('torch.', '')}")
            if value.device.type != "cpu":
                raise bad(where, f"is on {value.device.type}")
            storage = value.untyped_storage().nbytes()
            if max_storage_bytes is not None and storage > max_storage_bytes:
                raise bad(where, f"declares a storage of {storage:,} bytes in a file of {max_storage_bytes:,}")
            end = value.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride()))
            if value.numel() and max(value.numel(), end) * value.element_size() > storage:
                raise bad(where, f"declares {value.numel():,} elements over a storage of {storage:,} bytes")
            continue
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, dict):
                for key, item in value.items():
                    name = key if isinstance(key, str) else repr(key)[:40]
                    stack.append((f"{where}.{name}" if where else name, item))
                    stack.append((where, key))
            else:
                stack.extend((where, item) for item in value)


def global_step(checkpoint: dict) -> Optional[int]:
    """The training step saved with a checkpoint ({"_GlobalSteps__global_step": tensor([600017])})."""
    step = checkpoint.get("global_step")
    if isinstance(step, dict):
        step = next(iter(step.values()), None)
    try:
        return int(step.reshape(-1)[0].item()) if hasattr(step, "reshape") else int(step) if step is not None else None
    except (TypeError, ValueError, IndexError, RuntimeError, OverflowError):  # NaN, inf, empty, text
        return None


ENCODER_KEYS = "network_body.observation_encoder."


PROCESSOR_KEY = re.compile(r"^network_body\.observation_encoder\.processors\.(\d+)\.(.+)$")


def _state_tensor(state: dict, key: str, bad: Callable[[str], Exception]):
    value = state.get(key)
    if not isinstance(value, torch.Tensor):
        raise bad(f"missing tensor '{key}'")
    return value


def check_state_dict(state: dict, bad: Callable[[str], Exception]) -> None:
    """The checks a strict load does not make: names are text, weights float32 and finite,
    normalisers plausible, declared action sizes whole numbers."""
    for key, value in state.items():
        if not isinstance(key, str):
            raise bad(f"non-text key {key!r}")
        if not isinstance(value, torch.Tensor):
            raise bad(f"'{key}' is a {type(value).__name__}, expected a tensor")
        if key.endswith("normalization_steps"):
            if value.numel() != 1 or value.dtype.is_floating_point or value.dtype == torch.bool or value.is_complex():
                raise bad(f"'{key}' must be one integer")
            if int(value.item()) < 1:
                raise bad(f"'{key}' is {int(value.item())}, expected >= 1")
            continue
        if value.dtype != torch.float32:
            raise bad(f"'{key}' is {str(value.dtype).replace('torch.', '')}, expected float32")
        if not bool(torch.isfinite(value).all()):
            raise bad(f"'{key}' holds NaN or infinite values")
        if key.endswith("running_variance") and bool((value <= 0).any()):
            raise bad(f"'{key}' has values <= 0")
        if key.endswith("_size_vector") or key.endswith("size_vector_deprecated"):
            if bool((value != torch.round(value)).any()) or bool((value < 0).any()) or bool((value > 1e6).any()):
                raise bad(f"'{key}' holds {value.reshape(-1)[:8].tolist()}, expected whole numbers")


def onnx_difference(iface: OnnxInterface, state: dict, settings: "PolicySettings") -> Optional[str]:
    """How an ONNX shows it is not this checkpoint's, or None: its inputs' shapes differ from the
    policy's, or a weight it names as the checkpoint does has another shape. (Other weights of the
    same shapes are onnx-compare's business: a failed comparison, not another policy.)"""
    shapes = onnx_input_shapes(iface, dict(enumerate(settings.inputs)))
    if shapes is not None and [tuple(s) for s in shapes] != [tuple(i.shape) for i in settings.inputs]:
        return f"takes inputs {[list(s) for s in shapes]}, the checkpoint {[list(i.shape) for i in settings.inputs]}"
    for name, dims in iface.weights.items():
        if name in state and isinstance(state[name], torch.Tensor) and tuple(state[name].shape) != dims:
            return f"has {name} {list(dims)}, the checkpoint {list(state[name].shape)}"
    return None


def _network_body(state: dict, shape: Callable[[str], tuple], bad: Callable[[str], Exception]) -> tuple:
    """(hidden, num_layers, body_in, hyper, last): the body's width, depth and input width, whether it is a
    hypernetwork, and the index of its last hypernetwork layer (None for a plain body)."""
    body = "network_body._body_endoder."
    linear = sorted(
        int(m.group(1)) for k in state for m in [re.match(re.escape(body) + r"seq_layers\.(\d+)\.weight$", k)] if m
    )
    hyper_layers = sorted(
        int(m.group(1)) for k in state for m in [re.match(re.escape(body) + r"layers\.(\d+)\.(?:weight|bias)$", k)] if m
    )
    if linear:
        if linear != list(range(0, 2 * len(linear), 2)):
            raise bad(f"network-body layers {linear} are not Linear layers 0, 2, 4, ... with Swish between")
        hidden, num_layers = shape(f"{body}seq_layers.0.weight")[0], len(linear)
        body_in = shape(f"{body}seq_layers.0.weight")[1]
        return hidden, num_layers, body_in, False, None
    if hyper_layers:
        hyper_layers = sorted(set(hyper_layers))
        last = hyper_layers[-1]
        hidden, num_layers = shape(f"{body}layers.{last}.bias")[0], len(hyper_layers)
        generated = shape(f"{body}layers.{last}.hypernet.5.weight")[0]
        body_in = shape(f"{body}layers.0.weight")[1] if num_layers > 1 else generated // max(hidden, 1)
        return hidden, num_layers, body_in, True, last
    raise bad("no network body ('network_body._body_endoder.seq_layers.N.weight')")


def _visible_inputs(state: dict, shape: Callable[[str], tuple], hidden: int, bad: Callable[[str], Exception]) -> dict:
    """The inputs the checkpoint shows, by index: normalisers, image encoders, entity embeddings."""
    seen: dict[int, InputSpec] = {}
    for key in state:
        m = PROCESSOR_KEY.match(key)
        if not m or int(m.group(1)) in seen:
            continue
        i, rest, prefix = int(m.group(1)), m.group(2), f"{ENCODER_KEYS}processors.{m.group(1)}."
        if i > 1000:
            raise bad(f"processor index {i} is implausible")
        if rest.startswith("normalizer."):
            seen[i] = InputSpec(f"obs_{i}", "vector", shape(prefix + "normalizer.running_mean"), normalized=True)
        elif rest.startswith("self_ent_encoder."):
            width = shape(prefix + "self_ent_encoder.seq_layers.0.weight")[1]
            self_part = ATTENTION_EMBEDDING if f"{ENCODER_KEYS}x_self_encoder.seq_layers.0.weight" in state else 0
            seen[i] = InputSpec(f"obs_{i}", "entities", (None, width - self_part))
        elif rest.startswith(("conv_layers.", "dense.", "sequential.")):
            seen[i] = visual_input_spec(state, prefix, i, hidden, bad)
        else:
            raise bad(f"unsupported part '{key}'")
    return seen


def _all_inputs(
    seen: dict, onnx_iface: Optional[OnnxInterface], body_in: int, hidden: int, bad: Callable[[str], Exception]
) -> tuple:
    """(inputs, source): every input with its full shape, and where those shapes came from. The checkpoint
    cannot tell unnormalised vectors, image sides or entity counts; a fitting ONNX can."""
    onnx_shapes = onnx_input_shapes(onnx_iface, seen) if onnx_iface else None
    if onnx_shapes is not None:
        check_onnx_shapes(onnx_shapes, onnx_iface.path)
    fits = onnx_shapes is not None and onnx_shapes_agree(onnx_shapes, seen)
    source, no_onnx = "checkpoint", "no ML-Agents ONNX beside it"
    if onnx_iface is not None and not fits:  # say why the ONNX found was not used
        no_onnx = f"{onnx_iface.path.name} not used: its inputs " + (
            "are not ML-Agents' (obs_N, or vector_observation and visual_observation_N)"
            if onnx_shapes is None
            else f"{[list(d) for d in onnx_shapes]} do not fit the checkpoint's"
        )
    if fits:
        inputs = [
            replace(seen[i], shape=tuple(dims)) if i in seen else InputSpec(f"obs_{i}", "vector", tuple(dims))
            for i, dims in enumerate(onnx_shapes)
        ]
        needs = any(i not in seen for i in range(len(onnx_shapes))) or any(s.kind != "vector" for s in seen.values())
        source = f"checkpoint + {onnx_iface.path.name}" if needs else "checkpoint"
    else:
        hint = (
            "put its ML-Agents ONNX beside it or pass --onnx FILE"
            if onnx_iface is None
            else f"{no_onnx}; pass the policy's own ML-Agents ONNX with --onnx FILE"
        )
        inputs = inputs_from_checkpoint(seen, body_in, hidden, bad, hint)
        if any(s.kind == "visual" for s in inputs):
            source = f"checkpoint (square images assumed: {no_onnx})"
        elif len(inputs) > len(seen):
            source = f"checkpoint (unnormalised inputs taken as one: {no_onnx})"
    return inputs, source


def _action_heads(state: dict, shape: Callable[[str], tuple], bad: Callable[[str], Exception]) -> tuple:
    """(continuous, branches) from the heads, refused where the declared action sizes disagree with them."""
    mu_key = "action_model._continuous_distribution.mu.weight"
    continuous = shape(mu_key)[0] if mu_key in state else 0
    branches = []
    while f"action_model._discrete_distribution.branches.{len(branches)}.weight" in state:
        branches.append(shape(f"action_model._discrete_distribution.branches.{len(branches)}.weight")[0])
    if not continuous and not branches:
        raise bad("no action head (action_model._continuous_distribution.mu or _discrete_distribution.branches)")
    declared_c = state.get("continuous_act_size_vector")
    if isinstance(declared_c, torch.Tensor) and declared_c.numel() == 1 and int(declared_c.item()) != continuous:
        raise bad(f"continuous_act_size_vector says {int(declared_c.item())} actions but the heads give {continuous}")
    declared_d = state.get("discrete_act_size_vector")
    if isinstance(declared_d, torch.Tensor) and [int(v) for v in declared_d.reshape(-1).tolist()] != branches:
        raise bad(f"discrete_act_size_vector says {declared_d.reshape(-1).tolist()} but the branches give {branches}")
    return continuous, branches


def infer_settings(
    state: dict,
    path: Path,
    onnx_iface: Optional[OnnxInterface],
    config: dict,
    trainer_hint: Optional[str],
    goal_input: GoalInput,
) -> PolicySettings:
    """The policy's settings from its tensor shapes, the ONNX interface where shapes are silent."""

    def bad(problem: str) -> UsageError:
        return UsageError(f"{path}: not a usable ML-Agents policy: {problem}")

    check_state_dict(state, bad)
    shape = lambda key: tuple(_state_tensor(state, key, bad).shape)
    hidden, num_layers, body_in, hyper, last_layer = _network_body(state, shape, bad)
    seen = _visible_inputs(state, shape, hidden, bad)
    normalize = any(s.normalized for s in seen.values())
    inputs, source = _all_inputs(seen, onnx_iface, body_in, hidden, bad)

    # -- the goal signal of a hypernetwork body: named nowhere in the files
    if hyper:
        goal_width = shape(f"network_body._body_endoder.layers.{last_layer}.hypernet.0.weight")[1]
        pick_goal(inputs, goal_width, goal_input, hidden, path)
    elif goal_input is not None:
        raise UsageError(
            f"--goal-input {','.join(map(str, goal_indices(goal_input)))}: {path.name} has no "
            f"goal-conditioned (hypernetwork) body"
        )

    # -- memory, actions, trainer
    lstm_key = "network_body.lstm.lstm.weight_hh_l0"
    memory = shape(lstm_key)[1] * 2 if lstm_key in state else 0
    conditional = "action_model._continuous_distribution.log_sigma.weight" in state
    continuous, branches = _action_heads(state, shape, bad)
    streams = sorted(
        {m.group(1) for k in state for m in [re.match(r"^value_heads\.value_heads\.([^.]+)\.weight$", k)] if m}
    )
    trainer = trainer_hint or (
        str(config.get("trainer_type")) if config.get("trainer_type") in ("ppo", "sac", "poca") else None
    )  # the checkpoint's optimizer entries decide; the config only fills a gap
    return PolicySettings(
        inputs,
        hidden,
        num_layers,
        normalize,
        continuous,
        branches,
        memory,
        conditional,
        conditional,
        hyper,
        streams,
        trainer,
        source,
    )


def visual_input_spec(state: dict, prefix: str, i: int, hidden: int, bad) -> InputSpec:
    """Which of ML-Agents' five encoders, and the image's channels, from the processor's keys
    (the image side is set later from the ONNX, or solved for a square image)."""
    convs = sorted(
        int(m.group(1)) for k in state for m in [re.match(re.escape(prefix) + r"conv_layers\.(\d+)\.weight$", k)] if m
    )
    kernels = [tuple(state[f"{prefix}conv_layers.{c}.weight"].shape) for c in convs]
    if f"{prefix}sequential.0.weight" in state:
        encoder, channels = "resnet", state[f"{prefix}sequential.0.weight"].shape[1]
    elif not convs:
        encoder, channels = "fully_connected", None
    else:
        found = {
            tuple((out, kernel) for out, kernel, _ in cls.CONVS): name
            for name, cls in VISUAL_ENCODERS.items()
            if getattr(cls, "CONVS", None)
        }
        encoder = found.get(tuple((k[0], k[2]) for k in kernels))
        if encoder is None:
            raise bad(
                f"processor {i}: convolutions {[list(k) for k in kernels]} match none of ML-Agents' visual encoders"
            )
        channels = kernels[0][1]
    dense = state.get(f"{prefix}dense.weight" if encoder == "resnet" else f"{prefix}dense.0.weight")
    if not isinstance(dense, torch.Tensor) or dense.dim() != 2:
        raise bad(f"processor {i}: a {encoder} encoder without its dense layer")
    side = next(
        (
            s
            for s in range(VISUAL_ENCODERS[encoder].MIN_SIDE, 1025)  # the smallest square image that fits
            if channels and VISUAL_ENCODERS[encoder].flat_size(channels, s, s) == dense.shape[1]
        ),
        None,
    )
    return InputSpec(f"obs_{i}", "visual", (channels, side, side), encoder=encoder)


def inputs_from_checkpoint(
    seen: dict, body_in: int, hidden: int, bad, hint: str = "put its ML-Agents ONNX beside it or pass --onnx FILE"
) -> list:
    """Without an ONNX: every visible input, and the unexplained body width as ONE unnormalised vector input in the
    first gap (or last). Images are taken as square. `hint` ends the refusals that an ONNX would have avoided."""
    explained = sum(s.shape[0] if s.kind == "vector" else hidden for s in seen.values() if s.kind != "entities")
    explained += ATTENTION_EMBEDDING if any(s.kind == "entities" for s in seen.values()) else 0
    rest = body_in - explained
    if rest < 0:
        raise bad(f"the inputs' encodings are {explained} wide but the body's first layer takes {body_in}")
    count = (max(seen) + 1) if seen else 0
    gaps = [i for i in range(count) if i not in seen]
    if rest and not gaps:
        gaps = [count]
    # Unnormalised vectors leave no keys: their total width is known, not where they sit. After
    # every visible input they concatenate the same whether they are one input or several; a
    # gap among the visible inputs could hold any part of that width.
    if len(gaps) > 1 or (gaps and not rest) or (gaps and gaps[0] < count):
        raise bad(
            "cannot tell the policy's inputs from the checkpoint alone (inputs without weights of their "
            f"own sit among the others); {hint}"
        )
    if any(spec.kind == "entities" for spec in seen.values()):
        raise bad(f"the largest entity count of a buffer-sensor input is not in the checkpoint; {hint}")
    inputs = dict(seen)
    if gaps:
        inputs[gaps[0]] = InputSpec(f"obs_{gaps[0]}", "vector", (rest,))
    out = [inputs[i] for i in sorted(inputs)]
    for spec in out:
        if spec.kind == "visual" and spec.shape[1] is None:
            raise bad(f"{spec.name}: the image size of this visual input cannot be told from the checkpoint; {hint}")
    return out


def pick_goal(inputs: list, goal_width: int, goal_input: GoalInput, hidden: int, path: Path) -> None:
    """Mark the goal signal: the inputs named by --goal-input, else the only set of inputs whose encodings (a vector's
    width; a camera's encoder output, `hidden` wide) together are as wide as the hypernetwork's input -- ML-Agents
    concatenates several goal signals in input order; refuse when no set or more than one fits."""
    width = lambda i: inputs[i].shape[0] if inputs[i].kind == "vector" else hidden
    eligible = [i for i, s in enumerate(inputs) if s.kind in ("vector", "visual")]
    if goal_input is not None:
        named = goal_indices(goal_input)
        label = f"--goal-input {','.join(map(str, named))}"
        wrong = [i for i in named if i not in eligible]
        if wrong or not named:
            problem = f"input {wrong[0]} is not a vector or camera input of this policy" if wrong else "no inputs named"
            raise UsageError(f"{label}: {problem} (inputs: {', '.join(s.describe() for s in inputs)})")
        if sum(map(width, named)) != goal_width:
            widths = (
                f"{inputs[named[0]].name} is {width(named[0])}"
                if len(named) == 1
                else " + ".join(f"{inputs[i].name} ({width(i)})" for i in named) + f" = {sum(map(width, named))}"
            )
            raise UsageError(f"{label}: {widths} wide, but the hypernetwork takes a {goal_width}-wide goal")
        chosen = named
    else:
        sizes = range(1, len(eligible) + 1) if len(eligible) <= 16 else (1,)  # (2^16 sets at most)
        fits = [c for k in sizes for c in itertools.combinations(eligible, k) if sum(map(width, c)) == goal_width]
        if len(fits) != 1:
            found = "; ".join("+".join(inputs[i].name for i in c) for c in fits[:4]) + (" ..." if len(fits) > 4 else "")
            raise UsageError(
                f"{path.name}: a goal-conditioned policy whose goal input cannot be told from the shapes "
                f"({'these fit: ' + found if fits else 'no input or set of inputs is'} {goal_width} wide); "
                f"name it with --goal-input N[,N...]"
            )
        chosen = fits[0]
    for i in chosen:
        inputs[i].goal = True


def trainer_of(checkpoint: dict) -> Optional[str]:
    """ppo | sac | poca from the optimizer entries saved beside the policy."""
    if "Optimizer:q_network" in checkpoint or "Optimizer:entropy_optimizer" in checkpoint:
        return "sac"
    critic = checkpoint.get("Optimizer:critic")
    if isinstance(critic, dict) and "network_body._current_max_agents" in critic:
        return "poca"
    return "ppo" if "Optimizer:value_optimizer" in checkpoint or "Optimizer:critic" in checkpoint else None


def check_image_sides(settings: PolicySettings, path: Path, names: Optional[list] = None) -> None:
    """Every image at least as large as its encoder accepts (a smaller one fails inside the encoder's convolutions)."""
    for spec, name in zip(settings.inputs, names or [spec.name for spec in settings.inputs]):
        if spec.kind == "visual" and min(spec.chw[1:]) < VISUAL_ENCODERS[spec.encoder].MIN_SIDE:
            raise UsageError(
                f"{path}: {name} is {spec.chw[1]}x{spec.chw[2]}, smaller than the "
                f"{spec.encoder} encoder accepts ({VISUAL_ENCODERS[spec.encoder].MIN_SIDE})"
            )


def build_actor(settings: PolicySettings, state: dict, path: Path) -> "SimpleActor":
    """ML-Agents' module tree for these settings, loaded with load_state_dict(strict=True)."""
    check_image_sides(settings, path)
    try:
        # Built on the meta device (no memory) and given the checkpoint's own tensors: sizes that the ONNX or a crafted
        # file claims never allocate anything before the strict load has checked every shape against the checkpoint.
        with torch.device("meta"):
            actor = SimpleActor(settings)
        actor.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True, assign=True)
    except RuntimeError as exc:  # missing, unexpected or mis-shaped keys: the checkpoint is not this policy
        lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
        detail = next((l for l in lines[1:] if l), lines[0] if lines else "")
        raise UsageError(f"{path}: not a usable ML-Agents policy: {detail[:300]}")
    except (ValueError, TypeError, IndexError, ZeroDivisionError) as exc:
        raise UsageError(
            f"{path}: not a usable ML-Agents policy: {str(exc).splitlines()[0][:200] if str(exc) else exc}"
        )
    return actor.eval().requires_grad_(False)


@dataclass
class LoadedCheckpoint:
    path: Path
    settings: PolicySettings
    actor: "SimpleActor"  # float32, CPU, as loaded
    onnx: Optional[OnnxInterface]  # the ML-Agents ONNX that belongs to it, when found
    global_step: Optional[int] = None
    sha256: str = ""
    load_s: float = 0.0

    @property
    def parameters(self) -> int:
        """Weights and biases of the acting network (566,805 for Huggy), normalisers and value heads excluded."""
        return sum(
            p.numel()
            for name, p in self.actor.named_parameters()
            if not name.endswith(("_vector", "_deprecated"))
            and not name.startswith("value_heads.")
            and name != "version_number"
            and not (name.endswith("log_sigma") and p.dim() == 2)
        )


def policy_needs_onnx(state: dict) -> bool:
    """Whether the checkpoint leaves input shapes open: inputs without keys (unnormalised vectors),
    images, entity buffers. Huggy-like policies (every input normalised) skip reading the ONNX."""
    matches = [m for m in map(PROCESSOR_KEY.match, state) if m]
    seen = sorted({int(m.group(1)) for m in matches})
    if not seen or seen != list(range(len(seen))) or not all(m.group(2).startswith("normalizer.") for m in matches):
        return True
    widths = sum(
        int(state[f"{ENCODER_KEYS}processors.{i}.normalizer.running_mean"].shape[0])
        for i in seen
        if f"{ENCODER_KEYS}processors.{i}.normalizer.running_mean" in state
    )
    first = state.get("network_body._body_endoder.seq_layers.0.weight")
    return not (isinstance(first, torch.Tensor) and first.dim() == 2 and first.shape[1] == widths)
