"""torch's devices: --device resolved (CPU, CUDA, Ascend NPU through torch_npu), full float32 (TF32 and
HF32 off), synchronisation and casting the actor to a dtype."""

from __future__ import annotations

import importlib.util
import os
import warnings
from typing import TYPE_CHECKING, Callable

import torch

from ..core.errors import UsageError
from ..model.encoders import Normalizer
from .devices import parse_device

if TYPE_CHECKING:  # (annotations only)
    from ..model.networks import SimpleActor

__all__ = ["npu_count", "cuda_count", "select_device", "resolve_device", "full_float32", "synchronize", "cast_actor"]


def _import_torch_npu():
    """Import torch_npu quietly, as the original NPU adaptation does; None when it is not installed."""
    if importlib.util.find_spec("torch_npu") is None:
        return None
    os.environ.setdefault("ASCEND_GLOBAL_LOG_LEVEL", "3")  # CANN logs: errors only
    warnings.filterwarnings("ignore", message=".*owner.*")  # directory-ownership warning
    warnings.filterwarnings("ignore", message=".*group.*write.*")
    import torch_npu  # noqa: F401  (registers torch.npu)

    return torch_npu


def npu_count() -> int:
    if _import_torch_npu() is None:
        return 0
    try:
        return torch.npu.device_count() if torch.npu.is_available() else 0
    except Exception:
        return 0


def cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def select_device(text: str, npus: Callable[[], int], cudas: Callable[[], int]) -> str:
    """The device string for --device given how many NPUs and CUDA GPUs there are
    (auto: npu, else cuda, else cpu); UsageError naming what is missing."""
    kind, index = parse_device(text)
    if kind == "auto":
        return "npu:0" if npus() else "cuda:0" if cudas() else "cpu"
    if kind == "cpu":
        return "cpu"
    index = index or 0
    count, what = (npus(), "NPU") if kind == "npu" else (cudas(), "CUDA GPU")
    if count == 0:
        raise UsageError(f"--device {text}: no {what} is available ({_missing_backend(kind)})")
    if index >= count:
        raise UsageError(f"--device {text}: {what} {index} does not exist ({count} available)")
    return f"{kind}:{index}"


def _missing_backend(kind: str) -> str:
    if kind == "npu":
        return (
            "torch_npu is not installed (Ascend hosts: use CANN's torch/torch_npu)"
            if importlib.util.find_spec("torch_npu") is None
            else "torch_npu sees no NPU; check npu-smi info"
        )
    return "a CPU-only torch build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build sees no GPU"


def resolve_device(text: str):
    """A torch.device for --device, checking that it exists."""
    device = torch.device(select_device(text, npu_count, cuda_count))
    full_float32(device)
    return device


def full_float32(device) -> None:
    """Parity within 1e-5 needs float32 to mean float32: no TF32 on CUDA (cuDNN convolutions default to it) and no HF32
    on Ascend (torch_npu's convolutions default to it; its matmuls do not, but a host may have switched them on).
    Without these, camera policies' convolutions would round their inputs to a shortened mantissa on the accelerator."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif device.type == "npu":
        for group in ("conv", "matmul", "aclnn"):  # torch.npu.<group>.allow_hf32, where this torch_npu has it
            flags = getattr(torch.npu, group, None)
            if flags is not None and hasattr(flags, "allow_hf32"):
                flags.allow_hf32 = False


def synchronize(device) -> None:
    """Wait for the device, so that a clock read afterwards sees finished work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "npu":
        torch.npu.synchronize(device)


def cast_actor(actor: "SimpleActor", dtype) -> "SimpleActor":
    """The actor in `dtype`, its normalisers kept float32 (their variance sums overflow float16);
    float64 (the precision reference) converts everything."""
    for module in actor.modules():
        if dtype == torch.float64 or not isinstance(module, Normalizer):
            module._apply(lambda t: t.to(dtype) if t.is_floating_point() else t, recurse=False)
    actor.network_body.observation_encoder.compute_dtype = dtype
    return actor
