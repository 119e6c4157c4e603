"""The policy API's contract, torch-free: PolicyAPI (what load() and connect() both return) and the one set of
argument checks, messages and ranges that Policy and RemotePolicy share."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
from typing import Optional, Protocol

import numpy as np

from ..core.errors import CheckFailed, UsageError
from ..core.sources import SHA256_HEX
from ..core.spec import DTYPES, ENGINES, PolicySettings
from ..engines.devices import OrtDevice

__all__ = [
    "brief",
    "is_whole",
    "check_agent_ids",
    "steps_arguments",
    "check_behavior_spec",
    "PLAIN_TYPES",
    "plain_arrays",
    "PolicyAPI",
    "SEED_MIN",
    "SEED_END",
    "check_seed",
    "check_no_extras",
    "check_act_arguments",
    "check_policy_arguments",
    "check_load_arguments",
    "LOAD_ARGUMENTS",
    "python_words",
    "speaking_python",
    "on_device",
    "device_inputs",
]

# -- the Python API's argument checks, torch-free (Policy and connect() share them)
_MISSING = object()


def _field(value, name: str, expected: str):
    """`value.name`, or a UsageError saying what was expected (mlagents_envs' `expected` class)."""
    found = getattr(value, name, _MISSING)
    if found is _MISSING:
        raise UsageError(f"expected mlagents_envs' {expected} (with .{name}), got {type(value).__name__}")
    return found


def brief(value) -> str:
    """A value in a one-line message: its repr on one line, at most 80 characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def is_whole(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _whole_numbers(value, what: str, one: bool = False):
    """check_spec: a spec's sizes as ints (a list, or one with one=True); anything else (10.7, nan,
    None, True, '3') is a UsageError naming `what`, never read as the nearest whole number."""
    try:
        items = [value] if one else list(value)
    except TypeError:
        items = [None]
    if not all(map(is_whole, items)):
        raise UsageError(
            f"the behavior's {what} is {brief(value)}: expected {'a whole number' if one else 'whole numbers'}"
        )
    return int(items[0]) if one else [int(v) for v in items]


def check_agent_ids(value, what: str) -> list:
    """Agent ids as ML-Agents has them, whole numbers: a list of ints (any array shape flattened);
    a UsageError naming `what` for text, floats, None, objects or ragged lists."""
    try:
        ids = np.asarray(value)
    except (ValueError, TypeError):  # (ragged)
        ids = np.asarray(None)
    if ids.dtype.kind not in "iu" and ids.size:
        raise UsageError(f"{what}: agent ids must be whole numbers (ML-Agents' int32 agent_id), not {brief(value)}")
    return ids.reshape(-1).tolist()


def steps_arguments(s: PolicySettings, decision_steps, terminal_steps, deterministic) -> tuple:
    """get_action()'s arguments checked (UsageError naming the first wrong one), the same for a local policy and
    connect()'s: (ended agent ids, agent ids, ML-Agents' masks or None, the observations list)."""
    if not isinstance(deterministic, (bool, np.bool_)):
        raise UsageError(f"deterministic={deterministic!r}: expected True or False")
    ended = (
        []
        if terminal_steps is None
        else check_agent_ids(_field(terminal_steps, "agent_id", "TerminalSteps"), "terminal_steps")
    )
    ids = check_agent_ids(_field(decision_steps, "agent_id", "DecisionSteps"), "decision_steps")
    rows = len(ids)
    if rows > 1 and len(set(ids)) != rows:  # (one row would win the id's memory: refused, as ML-Agents never sends it)
        twice = next(agent for agent, n in collections.Counter(ids).items() if n > 1)
        raise UsageError(f"decision_steps: agent id {twice} appears more than once (an agent decides once a step)")
    masks = _field(decision_steps, "action_mask", "DecisionSteps") if s.discrete_branches else None
    if masks is not None and not (
        type(masks) in (list, tuple) and masks and all(type(m) is np.ndarray and m.dtype == bool for m in masks)
    ):
        raise UsageError(
            "decision_steps.action_mask: expected ML-Agents' list of per-branch bool arrays (True = masked) or None"
        )
    obs = _field(decision_steps, "obs", "DecisionSteps")
    if type(obs) not in (list, tuple):
        raise UsageError(
            f"decision_steps.obs: expected ML-Agents' list of arrays, one per observation, not {type(obs).__name__}"
        )
    return ended, ids, masks, obs


def check_behavior_spec(s: PolicySettings, behavior_spec) -> None:
    """check_spec() (local and connect()'s): UsageError naming the first difference between a BehaviorSpec and `s`."""
    specs = _field(behavior_spec, "observation_specs", "BehaviorSpec")
    if type(specs) not in (list, tuple):
        raise UsageError(f"the behavior's observation_specs is {brief(specs)}: expected a list")
    names = ", ".join(f"{i.name} {list(i.shape)}" for i in s.inputs)
    if len(specs) != len(s.inputs):
        raise UsageError(f"the behavior has {len(specs)} observation(s), this policy takes {len(s.inputs)} ({names})")
    for i, (spec, obs) in enumerate(zip(s.inputs, specs)):
        label = f" ({obs.name})" if isinstance(getattr(obs, "name", None), str) and obs.name else ""
        shape = _whole_numbers(_field(obs, "shape", "ObservationSpec"), f"observation {i}{label} shape")
        if shape != list(spec.shape):
            raise UsageError(
                f"observation {i}{label} has shape {shape}, this policy's {spec.name} takes {list(spec.shape)}"
            )
    actions = _field(behavior_spec, "action_spec", "BehaviorSpec")
    continuous = _whole_numbers(_field(actions, "continuous_size", "ActionSpec"), "continuous_size", one=True)
    if continuous != s.continuous_size:
        raise UsageError(f"the behavior has {continuous} continuous action(s), this policy {s.continuous_size}")
    branches = _whole_numbers(_field(actions, "discrete_branches", "ActionSpec"), "discrete_branches")
    if branches != list(s.discrete_branches):
        raise UsageError(f"the behavior has discrete branches {branches}, this policy {list(s.discrete_branches)}")


def _host_array(value):
    """A torch tensor as a CPU numpy array (detached: one that requires grad is fine); else `value`."""
    if value is None or type(value) is np.ndarray:  # (the usual case, before torch's slower isinstance)
        return value
    torch = sys.modules.get("torch")  # (a tensor exists only where torch was imported)
    if torch is not None and isinstance(value, torch.Tensor):
        try:
            value = value.detach().cpu()
            return (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        except (RuntimeError, TypeError, NotImplementedError):  # a meta or sparse tensor, a dtype numpy lacks
            raise UsageError(
                f"a torch tensor ({value.dtype}, {value.layout}, on {value.device}) whose values "
                f"cannot be read as a numpy array"
            ) from None
    return value


PLAIN_TYPES = (np.ndarray, type(None))  # act() arguments that need neither a check nor a conversion


def plain_arrays(observations) -> bool:
    if type(observations) is np.ndarray:
        return True
    if type(observations) is not list:
        return False
    for value in observations:
        if type(value) is not np.ndarray:
            return False
    return True


class PolicyAPI(Protocol):
    """What inference.load() (Policy, in this process) and inference.connect() (RemotePolicy, served by --mode serve)
    both return: the same methods, arguments, checks (this module's) and answers. tests/test_api_contract.py holds
    both to it."""

    @property
    def info(self) -> dict:
        """The policy as `--mode info --json` shows it: behaviour, inputs (name, kind, shape), continuous_size,
        discrete_branches, memory_size, engine, device, ..."""

    def act(
        self, observations, action_masks=None, deterministic: bool = True, seed: Optional[int] = None, memory=None
    ) -> dict:
        """Actions for one observation or a batch: {"continuous_actions", "discrete_actions", "memory"} (those the
        policy has) as numpy arrays. `action_masks`: 1 = allowed, or ML-Agents' per-branch bool arrays (True =
        masked); `seed` (check_seed) reproduces a sampled call; `memory`: an LSTM's, zeros when None."""

    def get_action(self, decision_steps, terminal_steps=None, deterministic: bool = True):
        """mlagents_envs' DecisionSteps (and TerminalSteps) in, an ActionTuple for env.set_actions out; an LSTM's
        memory is kept per agent id and forgotten for the agents in `terminal_steps`."""

    def check_spec(self, behavior_spec) -> None:
        """UsageError naming the first difference between a BehaviorSpec and this policy; None when they agree."""

    def reset(self, agent_ids=None) -> None:
        """Forget the memories get_action keeps: every agent's, or those of `agent_ids`."""

    def close(self) -> None:
        """Let go of what the policy holds: connect()'s connection (it answers no more), load()'s memories."""


SEED_MIN, SEED_END = -(2**63), 2**64  # a sampling seed: what torch.Generator.manual_seed takes (act(), a line's "seed")


def check_seed(seed, what: str = "seed", optional: bool = True) -> Optional[int]:
    """A sampling seed (act()'s, connect()'s, a stream line's "seed"): a whole number in [SEED_MIN, SEED_END), or None
    where `optional`; else a UsageError naming `what`."""
    if seed is None and optional:
        return None
    if not is_whole(seed) or not SEED_MIN <= int(seed) < SEED_END:
        raise UsageError(
            f"{what} {brief(seed)}: expected a whole number from -2**63 to 2**64 - 1 (what torch.Generator "
            f"takes){', or None' if optional else ''}"
        )
    return int(seed)


def check_no_extras(settings: PolicySettings, action_masks, memory) -> None:
    """Action masks for a policy without discrete actions, or a memory for one without memory: a UsageError."""
    if action_masks is not None and not settings.discrete_branches:
        raise UsageError("action masks given, but this policy has no discrete actions")
    if memory is not None and not settings.memory_size:
        raise UsageError("a memory given, but this policy has no memory (LSTM)")


def check_act_arguments(observations, action_masks, memory, deterministic, seed, generator=None) -> tuple:
    """act()'s arguments, each checked (UsageError naming it) before any work; torch tensors
    come back as CPU numpy arrays: (observations, action_masks, memory)."""
    if not isinstance(deterministic, (bool, np.bool_)):
        raise UsageError(f"deterministic={deterministic!r}: expected True or False")
    check_seed(seed)
    torch = sys.modules.get("torch")
    if (
        generator is not None
        and not isinstance(generator, np.random.Generator)
        and not (torch is not None and isinstance(generator, torch.Generator) and generator.device.type == "cpu")
    ):
        raise UsageError(
            f"generator={generator!r}: expected a CPU torch.Generator (the noise is drawn on the CPU), a "
            f"numpy Generator (noise_generator without torch), or None"
        )
    if isinstance(observations, dict):
        wrong = next((k for k in observations if not isinstance(k, str)), None)
        if wrong is not None:
            raise UsageError(f"observations: input names are text such as 'obs_0', not {wrong!r}")
        observations = {k: _host_array(v) for k, v in observations.items()}
    elif type(observations) in (list, tuple) and not all(type(v) is np.ndarray for v in observations):
        observations = [_host_array(v) for v in observations]
    return _host_array(observations), _host_array(action_masks), _host_array(memory)


def check_policy_arguments(dtype, engine, graphs, seed, spin=True, compile=False, threads=None) -> None:
    """load()'s and Policy's own arguments, each checked (UsageError naming it)."""
    for name, value, choices in (("dtype", dtype, DTYPES), ("engine", engine, ENGINES)):
        if not isinstance(value, str) or value not in choices:
            raise UsageError(f"{name} {brief(value)}: expected one of {', '.join(choices)}")
    for name, value in (("graphs", graphs), ("spin", spin), ("compile", compile)):
        if not isinstance(value, (bool, np.bool_)):
            raise UsageError(f"{name}={brief(value)}: expected True or False")
    if threads is not None and (not is_whole(threads) or not 1 <= threads <= 4096):
        raise UsageError(f"threads {brief(threads)}: expected a whole number of threads, at least 1 (or None)")
    if seed is not None and (not is_whole(seed) or not 0 <= seed < 2**63):
        raise UsageError(f"seed {brief(seed)}: expected a non-negative integer (or None: from the OS)")


def check_load_arguments(path, device, expect_sha256, onnx) -> None:
    """load()'s arguments, each checked (UsageError naming it) before the checkpoint is read."""
    for name, value in (("path", path), ("onnx", onnx)):
        if (value is not None or name == "path") and (
            not isinstance(value, (str, os.PathLike)) or not str(value).strip()
        ):
            raise UsageError(
                f"{name} {brief(value)}: expected "
                + (
                    "an ML-Agents run folder or a .pt checkpoint"
                    if name == "path"
                    else "the checkpoint's ML-Agents .onnx file"
                )
                + " (a str or Path)"
            )
    if expect_sha256 is not None and not (
        isinstance(expect_sha256, str) and SHA256_HEX.fullmatch(expect_sha256.strip())
    ):
        raise UsageError(f"expect_sha256 {expect_sha256!r}: expected 64 hexadecimal digits")
    if not isinstance(device, (str, OrtDevice)) and type(device).__module__ != "torch":
        raise UsageError(f"device {device!r}: expected a str such as 'cpu', 'cuda:0', 'npu:0', or a torch.device")


# The command line's options and the load() arguments that mean the same: the loaders, engines and devices name the
# option they were given ("--checkpoint X: no such file"); a Python caller reads the argument's name instead.
LOAD_ARGUMENTS = {
    "--checkpoint": "path",
    "--model-dir": "path",
    "--onnx": "onnx",
    "--device": "device",
    "--dtype": "dtype",
    "--engine": "engine",
    "--providers": "providers",
    "--goal-input": "goal_input",
    "--expect-sha256": "expect_sha256",
    "--graphs": "graphs",
    "--compile": "compile",
    "--threads": "threads",
    "--seed": "seed",
}
_OPTION = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, LOAD_ARGUMENTS)) + r")(?![\w-])( [A-Z][A-Z.]*[a-z]*\b)?")


def python_words(text: str) -> str:
    """A message made for the command line, in the Python API's words: each option load() also takes as its argument
    name ("--checkpoint X: no such file" -> "path X: no such file"; "pass --checkpoint FILE.pt" -> 'pass
    path="FILE.pt"')."""

    def argument(m: re.Match) -> str:
        name, placeholder = LOAD_ARGUMENTS[m.group(1)], (m.group(2) or "").strip()
        if placeholder == "FILE.onnx":  # (--onnx FILE.onnx alone: the policy's source, load()'s path)
            name = "path"
        return f'{name}="{placeholder}"' if placeholder else name

    return _OPTION.sub(argument, text)


@contextlib.contextmanager
def speaking_python():
    """The Python API's door: a UsageError or CheckFailed raised within, worded for the command line, is raised again
    of the same class in the Python API's words (python_words): the one place they are translated."""
    try:
        yield
    except Exception as exc:
        text = str(exc)
        if not isinstance(exc, UsageError) and not isinstance(exc, CheckFailed) or python_words(text) == text:
            raise
        raise type(exc)(python_words(text)) from None


# -- act() with torch tensors on the policy's own device: checked there, answered there


def on_device(observations, device) -> bool:
    """Whether act()'s observations are torch tensors on `device` (a torch.device), every one of them: a tensor, a
    list or tuple of tensors, or a dict of them. False for numpy, for a mix, and without torch."""
    torch = sys.modules.get("torch")
    if torch is None or type(device).__module__ != "torch":
        return False
    values = observations.values() if isinstance(observations, dict) else observations
    values = [values] if isinstance(values, torch.Tensor) else values
    if type(values) not in (list, tuple) and not isinstance(observations, dict):
        return False
    values = list(values)
    return bool(values) and all(isinstance(v, torch.Tensor) and v.device == device for v in values)


def device_inputs(settings: PolicySettings, device, observations, action_masks, memory) -> tuple:
    """act()'s tensors on the policy's device as the engine takes them, checked there as the host path checks
    arrays (shapes, finite values, masks of 0/1 with an allowed action in each branch, the memory's width), with one
    read of the checks' verdicts back to the host: (engine inputs on the device, rows, batched). UsageError naming
    the first wrong one. Masks: a tensor [rows, sum(branches)] or [sum(branches)], 1 = allowed (a bool tensor is
    refused, as on the host); memory: [rows, memory_size] or [memory_size]."""
    torch = sys.modules["torch"]  # (on_device found tensors: torch is imported; this module stays torch-free)

    s, checks = settings, []  # checks: (a 0-d bool tensor on the device: true when wrong, its message)
    flat, rows, batched = _device_observations(s, observations, checks)
    if action_masks is not None and not s.discrete_branches:
        raise UsageError("action masks given, but this policy has no discrete actions")
    if memory is not None and not s.memory_size:
        raise UsageError("a memory given, but this policy has no memory (LSTM)")
    if s.discrete_branches:
        flat.append(_device_masks(s, device, action_masks, rows, checks))
    if s.memory_size:
        flat.append(_device_memory(s, device, memory, rows, batched, checks))
    verdicts = torch.stack([wrong for wrong, _ in checks]).tolist()  # (the one wait: every verdict in one read)
    for bad, (_, message) in zip(verdicts, checks):
        if bad:
            raise UsageError(message)
    return flat, rows, batched


def _device_observations(s: PolicySettings, observations, checks: list) -> tuple:
    torch = sys.modules["torch"]  # (on_device found tensors: torch is imported; this module stays torch-free)

    if isinstance(observations, dict):
        names = [i.name for i in s.inputs]
        unknown = sorted(set(observations) - set(names))
        missing = [name for name in names if name not in observations]
        if unknown or missing:
            raise UsageError(
                f"observations: {'unknown input ' + repr(unknown[0]) if unknown else 'missing ' + repr(missing[0])} "
                f"(this policy takes {', '.join(names)})"
            )
        observations = [observations[name] for name in names]
    elif isinstance(observations, torch.Tensor):
        observations = [observations]
    observations = list(observations)
    if len(observations) != len(s.inputs):
        raise UsageError(f"{len(observations)} observation tensor(s) given, this policy takes {len(s.inputs)}")
    flat, rows, batched = [], None, None
    for x, spec in zip(observations, s.inputs):
        shape = tuple(spec.shape)
        one = tuple(x.shape) == shape
        if not one and tuple(x.shape[1:]) != shape or batched is not None and batched == one:
            raise UsageError(
                f"observation {spec.name}: shape {list(x.shape)}, expected {list(shape)} or [rows, "
                f"{', '.join(map(str, shape))}] (every input batched alike)"
            )
        if x.is_complex() or x.dtype == torch.bool:
            raise UsageError(f"observation {spec.name}: a {x.dtype} tensor; expected real numbers")
        batched = not one
        x = (x[None] if one else x).detach().to(torch.float32).contiguous()
        if rows is not None and x.shape[0] != rows:
            raise UsageError(f"observation {spec.name}: {x.shape[0]} rows, the first input has {rows}")
        rows = x.shape[0]
        flat.append(x)
        checks.append((~torch.isfinite(x).all(), f"observation {spec.name}: a value is nan or infinite"))
    return flat, rows, batched


def _device_masks(s: PolicySettings, device, action_masks, rows: int, checks: list):
    torch = sys.modules["torch"]  # (on_device found tensors: torch is imported; this module stays torch-free)

    width = sum(s.discrete_branches)
    if action_masks is None:
        return torch.ones((rows, width), dtype=torch.float32, device=device)
    if not isinstance(action_masks, torch.Tensor) or action_masks.device != device:
        raise UsageError(f"action_masks: with observations on {device}, a tensor on {device} (1 = allowed)")
    if action_masks.dtype == torch.bool:
        raise UsageError("action_masks: a bool tensor reads two ways (ML-Agents: True = masked); give 0/1")
    masks = action_masks.detach().to(torch.float32)
    if tuple(masks.shape) == (width,):
        masks = masks.expand(rows, width)
    if tuple(masks.shape) != (rows, width):
        raise UsageError(
            f"action_masks: expected shape [{rows}, {width}] (branches {list(s.discrete_branches)}), got "
            f"{list(action_masks.shape)}"
        )
    masks = masks.contiguous()
    checks.append((~((masks == 0) | (masks == 1)).all(), "action_masks: values must be 0 (forbidden) or 1 (allowed)"))
    at = 0
    for b, size in enumerate(s.discrete_branches):
        checks.append((~masks[:, at : at + size].any(dim=1).all(), f"action_masks: branch {b} allows no action"))
        at += size
    return masks


def _device_memory(s: PolicySettings, device, memory, rows: int, batched: bool, checks: list):
    torch = sys.modules["torch"]  # (on_device found tensors: torch is imported; this module stays torch-free)

    if memory is None:
        return torch.zeros((rows, 1, s.memory_size), dtype=torch.float32, device=device)
    if not isinstance(memory, torch.Tensor) or memory.device != device:
        raise UsageError(f"memory: with observations on {device}, a tensor on {device}")
    state = memory.detach().to(torch.float32)
    if tuple(state.shape) == (s.memory_size,) and not batched:
        state = state[None]
    if tuple(state.shape) != (rows, s.memory_size):
        raise UsageError(f"memory: expected shape [{rows}, {s.memory_size}], got {list(memory.shape)}")
    checks.append((~torch.isfinite(state).all(), "memory: a value is nan or infinite"))
    return state.reshape(rows, 1, s.memory_size).contiguous()
