"""The behaviour spec, torch-free: what a policy takes and gives (inputs, action sizes, memory),
ML-Agents' tensor names in their order, and the deterministic-action rules on numpy arrays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import numpy as np

from .errors import UsageError

__all__ = [
    "continuous_only",
    "GoalInput",
    "DTYPES",
    "ENGINES",
    "FLOAT32",
    "NORMALIZER_CLIP",
    "ACTION_CLIP",
    "ATTENTION_EMBEDDING",
    "ENTITY_ABSENT",
    "MAX_ENTITIES",
    "clipped_action",
    "deterministic_continuous",
    "deterministic_discrete",
    "input_names",
    "mlagents_output_names",
    "step_outputs",
    "engine_output_names",
    "InputSpec",
    "PolicySettings",
    "goal_indices",
    "Actions",
    "action_tuple",
    "no_actions",
]


def continuous_only(settings: PolicySettings) -> bool:
    return bool(settings.continuous_size) and not settings.discrete_branches and not settings.memory_size


GoalInput = Union[int, Sequence[int], None]  # load(goal_input=...): one input index or several


DTYPES = ("float32", "float16", "bfloat16")


ENGINES = ("auto", "torch", "onnxruntime")


FLOAT32 = np.dtype(np.float32)


NORMALIZER_CLIP = 5.0  # ML-Agents clamps normalized observations to [-5, 5]


ACTION_CLIP = 3.0  # ... and PPO/POCA continuous actions to [-3, 3], then divides by 3


ATTENTION_EMBEDDING = 128  # ObservationEncoder.ATTENTION_EMBEDDING_SIZE: fixed whatever hidden_units is


ENTITY_ABSENT = 0.01  # an entity row whose squared sum is below this is padding (get_zero_entities_mask)


MAX_ENTITIES = 4096  # a buffer sensor's largest entity count an ONNX may declare (attention is N x N per agent)


def clipped_action(x):
    """ML-Agents' PPO/POCA continuous action from mu or a sample: clip(x, -3, 3) / 3 (a numpy array,
    or a torch tensor inside the graph: both have clip)."""
    return x.clip(-ACTION_CLIP, ACTION_CLIP) / ACTION_CLIP


def deterministic_continuous(mu, tanh_squash: bool):
    """ML-Agents' deterministic continuous action: clip(mu, -3, 3) / 3 (PPO, POCA), or SAC's raw mu
    (tanh-squashed policies: what ML-Agents 1.1.0 exports)."""
    return mu if tanh_squash else clipped_action(mu)


def deterministic_discrete(probs: list) -> np.ndarray:
    """Each branch's most likely allowed action (the first on ties, as ONNX's ArgMax in ML-Agents'
    export): probs (or masked logits) is one [rows, size] array per branch; int64 [rows, branches].
    networks.branch_argmax is the same rule on tensors, inside the graph."""
    return np.stack([np.argmax(p, axis=1) for p in probs], axis=1).astype(np.int64)


# The graphs' interface, written once: ML-Agents' input and output names in its order. ML-Agents'
# export, the engines' graph, every feed and every fetch list come from these.
def input_names(s: "PolicySettings", exported: bool = False, declared: bool = False) -> list:
    """The policy's inputs (obs_0..obs_k; a 1.x ONNX-alone policy's own names), then action_masks (discrete actions) and
    recurrent_in (LSTM): the engines' inputs in order. exported: ML-Agents 1.1.0's export names, obs_0..obs_k always; it
    declares the last two always (declared=True) and the exporter drops them where the graph does not use them."""
    observations = [f"obs_{i}" if exported else spec.name for i, spec in enumerate(s.inputs)]
    return (
        observations
        + (["action_masks"] if declared or s.discrete_branches else [])
        + (["recurrent_in"] if declared or s.memory_size else [])
    )


def mlagents_output_names(s: "PolicySettings") -> list:
    """ML-Agents' ModelSerializer outputs (SimpleActor.forward)."""
    continuous = ["continuous_actions", "continuous_action_output_shape", "deterministic_continuous_actions"]
    discrete = ["discrete_actions", "discrete_action_output_shape", "deterministic_discrete_actions"]
    return (
        ["version_number", "memory_size"]
        + (continuous if s.continuous_size else [])
        + (discrete if s.discrete_branches else [])
        + (["recurrent_out"] if s.memory_size else [])
    )


def step_outputs(s: "PolicySettings", deterministic: bool) -> list:
    """What one step copies back: the deterministic actions, or what sampling draws from (mu, SAC's
    log_sigma, the masked probabilities); and the next memory."""
    sampled = ["mu"] + (["log_sigma"] if s.tanh_squash else [])
    continuous = ["deterministic_continuous_actions"] if deterministic else sampled
    discrete = "deterministic_discrete_actions" if deterministic else "probabilities"
    return (
        (continuous if s.continuous_size else [])
        + ([discrete] if s.discrete_branches else [])
        + (["recurrent_out"] if s.memory_size else [])
    )


def engine_output_names(s: "PolicySettings") -> list:
    """The engines' graph (EngineHeads): everything a deterministic or a sampled step needs."""
    deterministic = step_outputs(s, True)
    return [
        n
        for n in [
            "mu",
            "deterministic_continuous_actions",
            "log_sigma",
            "probabilities",
            "deterministic_discrete_actions",
            "recurrent_out",
        ]
        if n in deterministic or n in step_outputs(s, False)
    ]


@dataclass
class InputSpec:
    """One input (sensor) of the policy, named as ML-Agents' ONNX names it."""

    name: str  # obs_0, obs_1, ...
    kind: str  # vector | visual | entities
    shape: tuple  # (n,) | (channels, height, width) | (max entities, features)
    normalized: bool = False
    encoder: Optional[str] = None  # vis_encode_type of a visual input
    goal: bool = False  # the goal signal of a goal-conditioned (hypernetwork) body
    channels_last: bool = False  # an image taken as (height, width, channels): a 1.x ONNX that declares it so

    @property
    def chw(self) -> tuple:
        """An image's (channels, height, width), whatever layout the input takes."""
        return (self.shape[2], self.shape[0], self.shape[1]) if self.channels_last else tuple(self.shape)

    def describe(self) -> str:
        dims = "x".join(map(str, self.shape))
        if self.kind == "visual":
            layout = "H x W x C" if self.channels_last else "C x H x W"
            return f"{self.name}: image {dims} ({layout}, {self.encoder} encoder)"
        if self.kind == "entities":
            return f"{self.name}: up to {self.shape[0]} entities x {self.shape[1]} features (attention)"
        return (
            f"{self.name}: vector {dims}{', normalized' if self.normalized else ''}"
            f"{', goal signal' if self.goal else ''}"
        )


@dataclass
class PolicySettings:
    """What ML-Agents' NetworkSettings, ActionSpec and ObservationSpecs say about a policy."""

    inputs: list
    hidden_units: int
    num_layers: int
    normalize: bool
    continuous_size: int = 0
    discrete_branches: list = field(default_factory=list)
    memory_size: int = 0
    conditional_sigma: bool = False  # SAC: log_sigma is a layer ...
    tanh_squash: bool = False  # ... and actions are tanh-squashed
    hyper: bool = False  # goal-conditioned body (HyperNetwork)
    value_streams: list = field(default_factory=list)  # shared critic's value heads in the policy
    trainer: Optional[str] = None  # ppo | sac | poca
    source: str = "checkpoint"  # where the input shapes came from


def goal_indices(goal_input: GoalInput) -> tuple:
    """--goal-input / load(goal_input=...): one input index or several, as a sorted tuple."""
    try:
        values = (goal_input,) if isinstance(goal_input, (int, np.integer)) else tuple(goal_input)
    except TypeError:
        values = (goal_input,)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise UsageError(f"goal_input {goal_input!r}: expected an input index or a list of them")
    return tuple(sorted(set(int(v) for v in values)))


@dataclass
class Actions:
    """mlagents_envs' ActionTuple where mlagents_envs is not installed: the same fields, continuous
    float32 [agents, continuous size] and discrete int32 [agents, branches] (zero-width when none)."""

    continuous: np.ndarray
    discrete: np.ndarray


_ACTION_TUPLE: list = []


def action_tuple(continuous: np.ndarray, discrete: np.ndarray):
    """mlagents_envs' ActionTuple when it is installed (what env.set_actions takes), else Actions."""
    if not _ACTION_TUPLE:
        try:
            from mlagents_envs.base_env import ActionTuple
        except Exception:  # not installed, or not importable with this numpy/python
            ActionTuple = Actions
        _ACTION_TUPLE.append(ActionTuple)
    return _ACTION_TUPLE[0](continuous=continuous, discrete=discrete)


def no_actions(s: "PolicySettings") -> dict:
    """act()'s answer for 0 observations: each output with 0 rows and its width (float32, int64, float32)."""
    out = {}
    if s.continuous_size:
        out["continuous_actions"] = np.zeros((0, s.continuous_size), np.float32)
    if s.discrete_branches:
        out["discrete_actions"] = np.zeros((0, len(s.discrete_branches)), np.int64)
    if s.memory_size:
        out["memory"] = np.zeros((0, s.memory_size), np.float32)
    return out
