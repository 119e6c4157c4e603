"""ML-Agents' observation encoders: normaliser, vector input, the five visual encoders, entity attention, goal
conditioning. Mirrored from Unity ML-Agents 1.1.0, mlagents/trainers/torch_entities (encoders.py, layers.py,
attention.py, conditioning.py; Copyright Unity Technologies, Apache License 2.0) under its attribute names, which ARE
the checkpoint's state-dict keys (load_state_dict(strict=True)). Inference only: no initialisers, no normaliser
updates."""

from typing import Optional

import torch
from torch import nn

from ..core import geometry
from ..core.spec import ATTENTION_EMBEDDING, ENTITY_ABSENT, NORMALIZER_CLIP

__all__ = [
    "exporting",
    "Swish",
    "LayerNorm",
    "LinearEncoder",
    "Normalizer",
    "VectorInput",
    "SimpleVisualEncoder",
    "NatureVisualEncoder",
    "SmallVisualEncoder",
    "FullyConnectedVisualEncoder",
    "ResNetBlock",
    "ResNetVisualEncoder",
    "VISUAL_ENCODERS",
    "get_zero_entities_mask",
    "EntityEmbedding",
    "MultiHeadAttention",
    "ResidualSelfAttention",
    "ObservationEncoder",
    "HyperNetwork",
    "ConditionalEncoder",
]


def exporting() -> bool:
    """Inside torch.onnx.export: the modules then trace ML-Agents' own node pattern (Sigmoid and Mul for Swish, the
    normaliser's divisor from its statistics, a Concat of one encoding), which tests hold node for node."""
    return torch.onnx.is_in_onnx_export()


class Swish(nn.Module):
    """x * sigmoid(x): torch's one-kernel silu when running, in place where the caller hands over a tensor it made
    and reads no more (inplace=True) and no gradient is recorded; ML-Agents' Sigmoid and Mul in an export."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, data):
        if exporting():
            return torch.mul(data, torch.sigmoid(data))
        return nn.functional.silu(data, inplace=self.inplace and not torch.is_grad_enabled())


class LayerNorm(nn.Module):
    """No learned scale or shift; population variance; epsilon 1e-5."""

    def forward(self, layer_activations):
        mean = torch.mean(layer_activations, dim=-1, keepdim=True)
        var = torch.mean((layer_activations - mean) ** 2, dim=-1, keepdim=True)
        return (layer_activations - mean) / (torch.sqrt(var + 1e-5))


class LinearEncoder(nn.Module):
    """num_layers x (Linear -> Swish), keys seq_layers.{0,2,4,...}."""

    def __init__(self, input_size: int, num_layers: int, hidden_size: int):
        super().__init__()
        layers = []
        for i in range(num_layers):
            layers += [nn.Linear(input_size if i == 0 else hidden_size, hidden_size), Swish(inplace=True)]
        self.seq_layers = nn.Sequential(*layers)

    def forward(self, input_tensor):
        return self.seq_layers(input_tensor)


class Normalizer(nn.Module):
    """clamp((x - running_mean) / sqrt(running_variance / normalization_steps), -5, 5).
    running_variance is a running SUM of squared deviations (1e8 in Huggy): in float16 it
    overflows, so the engines keep this module float32 whatever --dtype says.

    The divisor sqrt(running_variance / normalization_steps) is computed once, with the same kernel in the buffers'
    own dtype, whenever the statistics are loaded or the module is cast or moved (refresh), and kept in a
    non-persistent buffer: no new state-dict key, so a checkpoint still loads with strict=True. An export traces
    ML-Agents' own expression, so export-onnx writes its graph unchanged. Who changes the statistics in place
    otherwise calls refresh()."""

    def __init__(self, vec_obs_size: int):
        super().__init__()
        self.register_buffer("normalization_steps", torch.tensor(1))
        self.register_buffer("running_mean", torch.zeros(vec_obs_size))
        self.register_buffer("running_variance", torch.ones(vec_obs_size))
        self.register_buffer("divisor", torch.ones(vec_obs_size), persistent=False)
        self.refresh()

    def refresh(self) -> None:
        with torch.no_grad():
            self.divisor = torch.sqrt(self.running_variance / self.normalization_steps)

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self.refresh()

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self.refresh()  # (float64, the precision reference: a float64 divisor, not a cast of float32's)
        return self

    def forward(self, inputs):
        if inputs.dtype != self.running_mean.dtype:  # (a .to() of a float32 input exports as a no-op Cast node)
            inputs = inputs.to(self.running_mean.dtype)
        if exporting():
            divisor = torch.sqrt(self.running_variance / self.normalization_steps)
        else:
            divisor = self.divisor
        return torch.clamp((inputs - self.running_mean) / divisor, -NORMALIZER_CLIP, NORMALIZER_CLIP)


class VectorInput(nn.Module):
    def __init__(self, input_size: int, normalize: bool):
        super().__init__()
        self.normalizer = Normalizer(input_size) if normalize else None

    def forward(self, inputs):
        return self.normalizer(inputs) if self.normalizer is not None else inputs


# Each visual encoder reads its geometry from core.geometry, where it is written once (the ONNX reader reads it
# too): CONVS, MIN_SIDE (ML-Agents' smallest image for it) and flat_size (the width of what its dense layer takes),
# used to build it and to read a checkpoint.
class _ConvEncoder(nn.Module):
    """conv_layers (Conv2d -> LeakyReLU)* -> flatten (C, H, W order) -> dense (Linear -> LeakyReLU).
    Images are channel-first, as ML-Agents 1.1.0 feeds them (no permute)."""

    ENCODER = ""  # its vis_encode_type, the key of its geometry
    CONVS: tuple = ()  # (out channels, kernel, stride)
    MIN_SIDE = 1

    @classmethod
    def flat_size(cls, channels: int, height: int, width: int) -> int:
        return geometry.flat_size(cls.ENCODER, channels, height, width)

    def __init__(self, height: int, width: int, initial_channels: int, output_size: int):
        super().__init__()
        layers, channels = [], initial_channels
        for out, kernel, stride in self.CONVS:
            layers += [nn.Conv2d(channels, out, [kernel, kernel], [stride, stride]), nn.LeakyReLU()]
            channels = out
        self.final_flat = self.flat_size(initial_channels, height, width)
        self.conv_layers = nn.Sequential(*layers)
        self.dense = nn.Sequential(nn.Linear(self.final_flat, output_size), nn.LeakyReLU())

    def forward(self, visual_obs):
        hidden = self.conv_layers(visual_obs)
        return self.dense(hidden.reshape([-1, self.final_flat]))


class SimpleVisualEncoder(_ConvEncoder):
    ENCODER = "simple"
    CONVS, MIN_SIDE = geometry.CONVS[ENCODER], geometry.MIN_SIDE[ENCODER]


class NatureVisualEncoder(_ConvEncoder):
    ENCODER = "nature_cnn"
    CONVS, MIN_SIDE = geometry.CONVS[ENCODER], geometry.MIN_SIDE[ENCODER]


class SmallVisualEncoder(_ConvEncoder):  # vis_encode_type "match3"
    ENCODER = "match3"
    CONVS, MIN_SIDE = geometry.CONVS[ENCODER], geometry.MIN_SIDE[ENCODER]


class FullyConnectedVisualEncoder(nn.Module):
    MIN_SIDE = geometry.MIN_SIDE["fully_connected"]

    @staticmethod
    def flat_size(channels: int, height: int, width: int) -> int:
        return geometry.flat_size("fully_connected", channels, height, width)

    def __init__(self, height: int, width: int, initial_channels: int, output_size: int):
        super().__init__()
        self.input_size = self.flat_size(initial_channels, height, width)
        self.dense = nn.Sequential(nn.Linear(self.input_size, output_size), nn.LeakyReLU())

    def forward(self, visual_obs):
        return self.dense(visual_obs.reshape(-1, self.input_size))


class ResNetBlock(nn.Module):
    def __init__(self, channel: int):
        super().__init__()
        self.layers = nn.Sequential(
            Swish(),  # (not in place: its input is the block's input, added back after)
            nn.Conv2d(channel, channel, [3, 3], [1, 1], padding=1),
            Swish(inplace=True),
            nn.Conv2d(channel, channel, [3, 3], [1, 1], padding=1),
        )

    def forward(self, input_tensor):
        return input_tensor + self.layers(input_tensor)


class ResNetVisualEncoder(nn.Module):
    CHANNELS, MIN_SIDE = geometry.RESNET_CHANNELS, geometry.MIN_SIDE["resnet"]

    @staticmethod
    def flat_size(channels: int, height: int, width: int) -> int:
        return geometry.flat_size("resnet", channels, height, width)

    def __init__(self, height: int, width: int, initial_channels: int, output_size: int):
        super().__init__()
        layers, last = [], initial_channels
        for channel in self.CHANNELS:
            layers += [
                nn.Conv2d(last, channel, [3, 3], [1, 1], padding=1),
                nn.MaxPool2d([3, 3], [2, 2]),
                ResNetBlock(channel),
                ResNetBlock(channel),
            ]
            last = channel
        layers.append(Swish(inplace=True))
        self.final_flat_size = self.flat_size(initial_channels, height, width)
        self.dense = nn.Linear(self.final_flat_size, output_size)
        self.sequential = nn.Sequential(*layers)

    def forward(self, visual_obs):
        hidden = self.sequential(visual_obs)
        return torch.relu(self.dense(hidden.reshape(-1, self.final_flat_size)))


VISUAL_ENCODERS = {
    "simple": SimpleVisualEncoder,
    "nature_cnn": NatureVisualEncoder,
    "resnet": ResNetVisualEncoder,
    "match3": SmallVisualEncoder,
    "fully_connected": FullyConnectedVisualEncoder,
}


def get_zero_entities_mask(entities: list):
    """1 for an absent entity row (squared sum < 0.01), 0 for a present one; [B, total rows]."""
    with torch.no_grad():
        return torch.cat([(torch.sum(ent**2, dim=2) < ENTITY_ABSENT).float() for ent in entities], dim=1)


class EntityEmbedding(nn.Module):
    """Each entity row, with the agent's own encoding in front when there is one, through
    Linear -> Swish (self_ent_encoder)."""

    def __init__(self, entity_size: int, entity_num_max_elements: Optional[int], embedding_size: int):
        super().__init__()
        self.self_size = 0
        self.entity_size = entity_size
        self.entity_num_max_elements = entity_num_max_elements or -1
        self.embedding_size = embedding_size
        self.self_ent_encoder = LinearEncoder(entity_size, 1, embedding_size)

    def add_self_embedding(self, size: int) -> None:
        self.self_size = size
        self.self_ent_encoder = LinearEncoder(self.self_size + self.entity_size, 1, self.embedding_size)

    def forward(self, x_self, entities):
        if self.self_size > 0:
            expanded_self = x_self.reshape(-1, 1, self.self_size)
            expanded_self = torch.cat([expanded_self] * entities.shape[1], dim=1)
            entities = torch.cat([expanded_self, entities], dim=2)
        return self.self_ent_encoder(entities)


class MultiHeadAttention(nn.Module):
    NEG_INF = -1e6

    def __init__(self, embedding_size: int, num_heads: int):
        super().__init__()
        self.n_heads, self.head_size, self.embedding_size = num_heads, embedding_size // num_heads, embedding_size

    def forward(self, query, key, value, n_q: int, n_k: int, key_mask):
        b = -1
        query = query.reshape(b, n_q, self.n_heads, self.head_size).permute([0, 2, 1, 3])
        key = key.reshape(b, n_k, self.n_heads, self.head_size).permute([0, 2, 1, 3]).permute([0, 1, 3, 2])
        qk = torch.matmul(query, key)  # (b, h, n_q, n_k)
        key_mask = key_mask.reshape(b, 1, 1, n_k)
        # scaled by the full embedding width (sqrt(128)), not the head width, as ML-Agents does
        # ML-Agents' -1e6 is -inf in float16, and 0 * -inf is NaN for every key kept: there, the dtype's lowest finite
        # value masks as well (float32's export keeps -1e6)
        neg_inf = max(self.NEG_INF, torch.finfo(qk.dtype).min)
        qk = (1 - key_mask) * qk / (self.embedding_size**0.5) + key_mask * neg_inf
        att = torch.softmax(qk, dim=3)
        value = value.reshape(b, n_k, self.n_heads, self.head_size).permute([0, 2, 1, 3])
        value_attention = torch.matmul(att, value).permute([0, 2, 1, 3])
        return value_attention.reshape(b, n_q, self.embedding_size), att


class ResidualSelfAttention(nn.Module):
    EPSILON = 1e-7

    def __init__(self, embedding_size: int, entity_num_max_elements: Optional[int] = None, num_heads: int = 4):
        super().__init__()
        self.max_num_ent = entity_num_max_elements
        self.attention = MultiHeadAttention(embedding_size, num_heads)
        self.fc_q = nn.Linear(embedding_size, embedding_size)
        self.fc_k = nn.Linear(embedding_size, embedding_size)
        self.fc_v = nn.Linear(embedding_size, embedding_size)
        self.fc_out = nn.Linear(embedding_size, embedding_size)
        self.embedding_norm = LayerNorm()
        self.residual_norm = LayerNorm()

    def forward(self, inp, key_masks):
        inp = self.embedding_norm(inp)
        query, key, value = self.fc_q(inp), self.fc_k(inp), self.fc_v(inp)
        num_ent = inp.shape[1]
        output, _ = self.attention(query, key, value, num_ent, num_ent, key_masks)
        output = self.residual_norm(self.fc_out(output) + inp)  # the residual adds the normalised input
        numerator = torch.sum(output * (1 - key_masks).reshape(-1, num_ent, 1), dim=1)
        denominator = torch.sum(1 - key_masks, dim=1, keepdim=True) + self.EPSILON
        return numerator / denominator


class ObservationEncoder(nn.Module):
    """One processor per input (keys processors.<i>), the entity attention block when there
    are buffer sensors (rsa, x_self_encoder), concatenated: [non-entity inputs..., attention]."""

    def __init__(self, inputs: list, h_size: int, normalize: bool):
        super().__init__()
        processors, sizes = [], []
        for spec in inputs:
            if spec.kind == "vector":
                processors.append(VectorInput(spec.shape[0], normalize))
                sizes.append(spec.shape[0])
            elif spec.kind == "visual":
                channels, height, width = spec.chw
                processors.append(VISUAL_ENCODERS[spec.encoder](height, width, channels, h_size))
                sizes.append(h_size)
            else:  # entities: (N, F)
                processors.append(EntityEmbedding(spec.shape[1], spec.shape[0], ATTENTION_EMBEDDING))
                sizes.append(0)
        self.processors = nn.ModuleList(processors)
        self.rsa, self.x_self_encoder = None, None
        if any(isinstance(p, EntityEmbedding) for p in processors):
            if sum(sizes):
                self.x_self_encoder = LinearEncoder(sum(sizes), 1, ATTENTION_EMBEDDING)
                for p in processors:
                    if isinstance(p, EntityEmbedding):
                        p.add_self_embedding(ATTENTION_EMBEDDING)
            self.rsa = ResidualSelfAttention(
                ATTENTION_EMBEDDING, sum(s.shape[0] for s in inputs if s.kind == "entities")
            )
        self.total_enc_size = sum(sizes) + (ATTENTION_EMBEDDING if self.rsa is not None else 0)
        self.goal_indices = [i for i, s in enumerate(inputs) if s.goal]
        self.channels_last = [s.channels_last for s in inputs]
        self.total_goal_enc_size = sum(sizes[i] for i in self.goal_indices)
        self.compute_dtype = torch.float32  # the engines' --dtype; normalizers stay float32

    def encode(self, index: int, obs):
        processor = self.processors[index]
        if isinstance(processor, VectorInput):  # float32 from a normaliser; --dtype float16/bfloat16 casts it
            return _as_dtype(processor(obs), self.compute_dtype)
        if self.channels_last[index]:  # a 1.x file's [H, W, C] image, permuted as that ML-Agents did
            obs = obs.permute([0, 3, 1, 2])
        return processor(_as_dtype(obs, self.compute_dtype))

    def forward(self, inputs: list):
        encodes = [
            self.encode(i, x)
            for i, (p, x) in enumerate(zip(self.processors, inputs))
            if not isinstance(p, EntityEmbedding)
        ]
        if len(encodes) == 1 and not exporting():  # (a cat of one tensor is a copy)
            encoded_self = encodes[0]
        else:
            encoded_self = torch.cat(encodes, dim=1) if encodes else None
        entities = [
            (p, x.to(self.compute_dtype)) for p, x in zip(self.processors, inputs) if isinstance(p, EntityEmbedding)
        ]
        if entities:
            masks = get_zero_entities_mask([x for _, x in entities]).to(self.compute_dtype)
            processed_self = self.x_self_encoder(encoded_self) if self.x_self_encoder is not None else None
            qkv = torch.cat([p(processed_self, x) for p, x in entities], dim=1)
            attention = self.rsa(qkv, masks)
            encoded_self = attention if encoded_self is None else torch.cat([encoded_self, attention], dim=1)
        return encoded_self

    def get_goal_encoding(self, inputs: list):
        return torch.cat([self.encode(i, inputs[i]) for i in self.goal_indices], dim=1)


class HyperNetwork(nn.Module):
    """Generates a layer's weight matrix from the goal: hypernet = Linear, Swish, Linear, Swish,
    LayerNorm, Linear -> [input_size * output_size], read row-major as [input, output]."""

    def __init__(self, input_size: int, output_size: int, hyper_input_size: int, layer_size: int, num_layers: int):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        layers, size = [], hyper_input_size
        for _ in range(num_layers):
            layers += [nn.Linear(size, layer_size), Swish(inplace=True)]
            size = layer_size
        self.hypernet = nn.Sequential(*layers, LayerNorm(), nn.Linear(layer_size, input_size * output_size))
        self.bias = nn.Parameter(torch.zeros(output_size))

    def forward(self, input_activation, hyper_input):
        output_weights = self.hypernet(hyper_input).view(-1, self.input_size, self.output_size)
        return torch.bmm(input_activation.unsqueeze(1), output_weights).squeeze(1) + self.bias


class ConditionalEncoder(nn.Module):
    """The goal-conditioned body: layers.{0,2,...}; the last num_conditional_layers are HyperNetworks."""

    def __init__(
        self, input_size: int, goal_size: int, hidden_size: int, num_layers: int, num_conditional_layers: int = 1
    ):
        super().__init__()
        layers, size = [], input_size
        for i in range(num_layers):
            if num_layers - i <= num_conditional_layers:
                layers.append(HyperNetwork(size, hidden_size, goal_size, hidden_size, 2))
            else:
                layers.append(nn.Linear(size, hidden_size))
            layers.append(Swish(inplace=True))
            size = hidden_size
        self.layers = nn.ModuleList(layers)

    def forward(self, input_tensor, goal_tensor):
        activation = input_tensor
        for layer in self.layers:
            activation = layer(activation, goal_tensor) if isinstance(layer, HyperNetwork) else layer(activation)
        return activation


def _as_dtype(x: torch.Tensor, dtype) -> torch.Tensor:
    """x in dtype, with no Cast node in an export where it already is (ML-Agents' graph has none)."""
    return x if x.dtype == dtype else x.to(dtype)
