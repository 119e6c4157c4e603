"""ML-Agents' network body, LSTM, action model and actor, and the engines' heads (EngineHeads) over them. Mirrored
from Unity ML-Agents 1.1.0, mlagents/trainers/torch_entities (networks.py, layers.py, distributions.py,
action_model.py; Copyright Unity Technologies, Apache License 2.0) under its attribute names: torch.onnx.export of
SimpleActor writes the graph ML-Agents' ModelSerializer writes. No log-probabilities."""

import torch
from torch import nn

from ..core.spec import (
    PolicySettings,
    clipped_action,
    deterministic_continuous,
    engine_output_names,
    mlagents_output_names,
)
from .encoders import ConditionalEncoder, LinearEncoder, ObservationEncoder

__all__ = [
    "LSTM",
    "NetworkBody",
    "GaussianDistribution",
    "MultiCategoricalDistribution",
    "ActionModel",
    "ValueHeads",
    "SimpleActor",
    "EngineHeads",
    "branch_argmax",
]


class LSTM(nn.Module):
    """One LSTM step. The state travels as ML-Agents' ONNX has it, [batch, 1, memory_size] =
    [h, c]; torch's LSTM wants [1, batch, memory_size / 2] each, hence the transposes."""

    def __init__(self, input_size: int, memory_size: int):
        super().__init__()
        self.hidden_size = memory_size // 2
        self.lstm = nn.LSTM(input_size, self.hidden_size, 1, batch_first=True)

    def forward(self, input_tensor, memories):
        memories = torch.transpose(memories, 0, 1)
        h0 = memories[:, :, : self.hidden_size].contiguous()
        c0 = memories[:, :, self.hidden_size :].contiguous()
        lstm_out, hidden_out = self.lstm(input_tensor, (h0, c0))
        return lstm_out, torch.transpose(torch.cat(hidden_out, dim=-1), 0, 1)


class NetworkBody(nn.Module):
    def __init__(self, settings: "PolicySettings"):
        super().__init__()
        self.h_size, self.m_size = settings.hidden_units, settings.memory_size
        self.observation_encoder = ObservationEncoder(settings.inputs, settings.hidden_units, settings.normalize)
        self.processors = (
            self.observation_encoder.processors
        )  # the same modules under a second name, as ML-Agents has them
        total = self.observation_encoder.total_enc_size
        if self.observation_encoder.total_goal_enc_size > 0 and settings.hyper:
            self._body_endoder = ConditionalEncoder(
                total, self.observation_encoder.total_goal_enc_size, settings.hidden_units, settings.num_layers, 1
            )
        else:
            self._body_endoder = LinearEncoder(
                total, settings.num_layers, settings.hidden_units
            )  # sic: ML-Agents' spelling
        self.lstm = LSTM(settings.hidden_units, settings.memory_size) if settings.memory_size else None

    def forward(self, inputs: list, memories=None):
        encoded_self = self.observation_encoder(inputs)
        if isinstance(self._body_endoder, ConditionalEncoder):
            encoding = self._body_endoder(encoded_self, self.observation_encoder.get_goal_encoding(inputs))
        else:
            encoding = self._body_endoder(encoded_self)
        if self.lstm is not None:
            encoding, memories = self.lstm(encoding.reshape([-1, 1, self.h_size]), memories)
            encoding = encoding.reshape([-1, self.m_size // 2])
        return encoding, memories


class GaussianDistribution(nn.Module):
    """mu, and log_sigma: a parameter [1, n] (PPO/POCA) or a layer (SAC: conditional sigma)."""

    def __init__(self, hidden_size: int, num_outputs: int, conditional_sigma: bool, tanh_squash: bool):
        super().__init__()
        self.conditional_sigma, self.tanh_squash = conditional_sigma, tanh_squash
        self.mu = nn.Linear(hidden_size, num_outputs)
        if conditional_sigma:
            self.log_sigma = nn.Linear(hidden_size, num_outputs)
        else:
            self.log_sigma = nn.Parameter(torch.zeros(1, num_outputs))

    def forward(self, inputs, std: bool = False, sigma: bool = True):
        """(mu, log_sigma) with log_sigma expanded to mu's batch, as ML-Agents computes them; with std,
        (mu, exp(log_sigma)): ML-Agents' GaussianDistInstance(mu, exp(log_sigma)), its Exp inside this module.
        Without sigma, (mu, None): the engines read no sigma but SAC's, so PPO's mu * 0 + log_sigma is not run."""
        mu = self.mu(inputs)
        if not sigma:
            return mu, None
        log_sigma = (
            torch.clamp(self.log_sigma(inputs), min=-20, max=2) if self.conditional_sigma else mu * 0 + self.log_sigma
        )
        return (mu, torch.exp(log_sigma)) if std else (mu, log_sigma)


class MultiCategoricalDistribution(nn.Module):
    def __init__(self, hidden_size: int, act_sizes: list):
        super().__init__()
        self.act_sizes = list(act_sizes)
        self.branches = nn.ModuleList([nn.Linear(hidden_size, size) for size in act_sizes])

    def forward(self, inputs, masks) -> list:
        """Per branch softmax(logits * mask - 1e8 * (1 - mask)); forbidden actions get 0. In ML-Agents' order (its
        export, node for node): every branch's mask sliced first, then per branch the logits, -1 * mask + 1, softmax."""
        starts = [sum(self.act_sizes[:i]) for i in range(len(self.act_sizes))]
        allows = [masks[:, start : start + size] for start, size in zip(starts, self.act_sizes)]
        out = []
        for branch, allow in zip(self.branches, allows):
            logits, block = branch(inputs), -1.0 * allow + 1.0
            out.append(torch.softmax(logits * allow - 1e8 * block, dim=-1))
        return out


class ActionModel(nn.Module):
    def __init__(self, hidden_size: int, settings: "PolicySettings"):
        super().__init__()
        self._continuous_distribution = (
            GaussianDistribution(
                hidden_size, settings.continuous_size, settings.conditional_sigma, settings.tanh_squash
            )
            if settings.continuous_size
            else None
        )
        self._discrete_distribution = (
            MultiCategoricalDistribution(hidden_size, settings.discrete_branches)
            if settings.discrete_branches
            else None
        )


class ValueHeads(nn.Module):
    """A shared critic's value heads: loaded (strict) and never used for acting."""

    def __init__(self, stream_names: list, input_size: int):
        super().__init__()
        self.value_heads = nn.ModuleDict({name: nn.Linear(input_size, 1) for name in stream_names})


class SimpleActor(nn.Module):
    """The policy. forward() is ML-Agents' export signature: (observations, action_masks, memories) -> version_number,
    memory_size, [continuous_actions, continuous_action_output_shape, deterministic_continuous_actions],
    [discrete_actions, discrete_action_output_shape, deterministic_discrete_actions], [recurrent_out]."""

    MODEL_EXPORT_VERSION = 3

    def __init__(self, settings: "PolicySettings"):
        super().__init__()
        self.settings = settings
        param = lambda values: nn.Parameter(torch.Tensor(values), requires_grad=False)
        branches = settings.discrete_branches
        self.version_number = param([self.MODEL_EXPORT_VERSION])
        self.is_continuous_int_deprecated = param([int(not branches)])
        self.continuous_act_size_vector = param([settings.continuous_size])
        self.discrete_act_size_vector = param([branches])
        self.act_size_vector_deprecated = param([settings.continuous_size + sum(branches)])
        self.network_body = NetworkBody(settings)
        self.encoding_size = settings.memory_size // 2 if settings.memory_size else settings.hidden_units
        self.memory_size_vector = param([settings.memory_size])
        self.action_model = ActionModel(self.encoding_size, settings)
        if settings.value_streams:
            self.value_heads = ValueHeads(settings.value_streams, self.encoding_size)

    def heads(self, inputs: list, masks=None, memories=None, std: bool = False, sigma: bool = True):
        """What acting needs, in the engines' precision: mu and log_sigma (continuous; exp(log_sigma) with std, None
        without sigma), the masked probabilities per branch (discrete), the next memory."""
        encoding, memories_out = self.network_body(inputs, memories=memories)
        continuous = self.action_model._continuous_distribution
        discrete = self.action_model._discrete_distribution
        mu, log_sigma = continuous(encoding, std, sigma) if continuous is not None else (None, None)
        probs = discrete(encoding, masks) if discrete is not None else None
        return mu, log_sigma, probs, memories_out

    def forward(self, inputs: list, masks=None, memories=None):
        s = self.settings
        mu, std, probs, memories_out = self.heads(inputs, masks, memories, std=True)
        out = {"version_number": self.version_number, "memory_size": self.memory_size_vector}
        if mu is not None:
            sample = mu + torch.randn_like(mu) * std
            out.update(
                continuous_actions=torch.tanh(sample) if s.tanh_squash else clipped_action(sample),
                continuous_action_output_shape=self.continuous_act_size_vector,
                deterministic_continuous_actions=deterministic_continuous(mu, s.tanh_squash),
            )
        if probs is not None:
            out.update(
                discrete_actions=torch.cat([torch.multinomial(p, 1) for p in probs], dim=1),
                discrete_action_output_shape=self.discrete_act_size_vector,
                deterministic_discrete_actions=branch_argmax(probs),
            )
        if s.memory_size:
            out["recurrent_out"] = memories_out
        return tuple(out[name] for name in mlagents_output_names(s))


class EngineHeads(nn.Module):
    """The deterministic-only graph the engines run (torch eager, device graphs, or its ONNX export under
    onnxruntime): inputs obs_0..obs_k [, action_masks] [, recurrent_in]; outputs [mu, deterministic_continuous_actions
    (, log_sigma for SAC)] [, probabilities, deterministic_discrete_actions] [, recurrent_out], float32 except the
    discrete actions (int64). The deterministic discrete action is each branch's argmax (first index on ties) inside
    the graph, as in ML-Agents' export, so a deterministic step needs no work on the host."""

    def __init__(self, actor: SimpleActor):
        super().__init__()
        self.actor = actor
        s = actor.settings
        self.n_inputs, self.discrete, self.memory = len(s.inputs), bool(s.discrete_branches), bool(s.memory_size)
        self.output_names = engine_output_names(s)

    def forward(self, *flat, names=None):
        """The engine outputs (`names`, default all, in engine_output_names order) from ONE pass of the network."""
        names = self.output_names if names is None else names
        out = self.outputs(flat, names=names)
        return tuple(out[name] for name in names)

    def outputs(self, flat, cast=None, names=None) -> dict:
        """The outputs `names` (default all) by name, from one pass of the network, cast to float32 (or by `cast`:
        the float64 reference keeps its precision). Only what `names` reads is computed after the network body."""
        s, cast = self.actor.settings, cast or _as_float32
        wanted = set(self.output_names if names is None else names)
        dtype = self.actor.network_body.observation_encoder.compute_dtype
        inputs = list(flat[: self.n_inputs])
        masks = _in_dtype(flat[self.n_inputs], dtype) if self.discrete else None
        memories = _in_dtype(flat[-1], dtype) if self.memory else None
        sigma = s.tanh_squash and "log_sigma" in wanted  # (PPO's log_sigma is no engine output)
        mu, log_sigma, probs, memories_out = self.actor.heads(inputs, masks, memories, sigma=sigma)
        out = {}
        if mu is not None:
            out["mu"] = cast(mu)
            if "deterministic_continuous_actions" in wanted:
                out["deterministic_continuous_actions"] = deterministic_continuous(out["mu"], s.tanh_squash)
            if sigma:
                out["log_sigma"] = cast(log_sigma)
        if probs is not None:
            if "probabilities" in wanted:
                out["probabilities"] = cast(torch.cat(probs, dim=1))
            if "deterministic_discrete_actions" in wanted:
                out["deterministic_discrete_actions"] = branch_argmax(probs)
        if memories_out is not None and "recurrent_out" in wanted:
            out["recurrent_out"] = cast(memories_out)
        return out


def _as_float32(x: torch.Tensor) -> torch.Tensor:
    """x in float32 (no Cast node in an export where it already is)."""
    return _in_dtype(x, torch.float32)


def _in_dtype(x: torch.Tensor, dtype) -> torch.Tensor:
    """x in dtype (no Cast node in an export where it already is)."""
    return x if x.dtype == dtype else x.to(dtype)


def branch_argmax(probs: list) -> torch.Tensor:
    """spec.deterministic_discrete on tensors, as ML-Agents' export writes it (ArgMax per branch,
    the first on ties, then Concat): probs is one [rows, size] tensor per branch; int64 [rows, branches]."""
    return torch.cat([torch.argmax(p, dim=1, keepdim=True) for p in probs], dim=1)
