"""The visual encoders' geometry, written once and torch-free: each encoder's convolutions, the smallest image side
it accepts, the arithmetic of its output sides and flattened width, and how to tell an encoder from the kernels an
ONNX graph or a checkpoint carries. model/encoders.py builds its layers from it; core/onnx_graph.py recognises an
encoder with it.

Mirrored from Unity ML-Agents 1.1.0, mlagents/trainers/torch_entities/encoders.py (Copyright Unity Technologies,
Apache License 2.0): SimpleVisualEncoder, NatureVisualEncoder, SmallVisualEncoder ("match3"), ResNetVisualEncoder
and FullyConnectedVisualEncoder, and the minimum sizes of mlagents/trainers/torch_entities/utils.py."""

from typing import Optional, Sequence

__all__ = [
    "CONVS",
    "RESNET_CHANNELS",
    "MIN_SIDE",
    "KERNEL_ENCODERS",
    "conv_side",
    "pool_side",
    "flat_size",
    "encoder_from_kernels",
]


# vis_encode_type -> its convolutions in order, each (out channels, kernel, stride); no padding, a square kernel.
# "fully_connected" has none; "resnet" is not a plain stack (see RESNET_CHANNELS).
CONVS = {
    "simple": ((16, 8, 4), (32, 4, 2)),
    "nature_cnn": ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
    "match3": ((35, 3, 1), (144, 3, 1)),
    "fully_connected": (),
}

# ResNet: per stage, a 3x3 convolution (stride 1, padding 1) to this many channels, a 3x3 max pool of stride 2,
# then two residual blocks that keep the side.
RESNET_CHANNELS = (16, 32, 32)

# vis_encode_type -> ML-Agents' smallest image side for it.
MIN_SIDE = {"simple": 20, "nature_cnn": 36, "match3": 5, "resnet": 15, "fully_connected": 1}

# The (out channels, kernel) of each convolution, in order -> the encoder (what a graph's or a checkpoint's
# weights show: out channels and kernel size, not the stride).
KERNEL_ENCODERS = {tuple((out, kernel) for out, kernel, _ in convs): name for name, convs in CONVS.items()}


def conv_side(side: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """The output side of a convolution (or pool) with no dilation."""
    return (side + 2 * padding - kernel) // stride + 1


def pool_side(side: int) -> int:
    """The output side of ResNet's 3x3 max pool of stride 2."""
    return conv_side(side, 3, 2)


def flat_size(encoder: str, channels: int, height: int, width: int) -> int:
    """The width of what the encoder's dense layer takes: its last feature map, flattened (C, H, W)."""
    if encoder == "resnet":
        for _ in RESNET_CHANNELS:
            height, width = pool_side(height), pool_side(width)
        return RESNET_CHANNELS[-1] * height * width
    for out, kernel, stride in CONVS[encoder]:
        height, width, channels = conv_side(height, kernel, stride), conv_side(width, kernel, stride), out
    return channels * height * width


def encoder_from_kernels(kernels: Sequence[tuple], pooled: bool = False) -> Optional[str]:
    """The encoder whose convolutions are these (out channels, kernel) pairs in order ("resnet" where the
    convolutions are max-pooled), or None when none of ML-Agents' encoders has them."""
    return "resnet" if pooled else KERNEL_ENCODERS.get(tuple(tuple(k) for k in kernels))
