"""torch's devices: --device resolved (CPU, CUDA, Ascend NPU through torch_npu), full float32 (TF32 and HF32 off, and
what overrides that said), what a dtype runs as on a device, synchronisation and casting the actor to a dtype."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Callable

import torch

from ..core.errors import UsageError
from ..core.extras import CANN_ENV_HINT, before_torch
from ..model.encoders import Normalizer
from .devices import parse_device

if TYPE_CHECKING:  # (annotations only)
    from ..model.networks import SimpleActor

__all__ = [
    "npu_count",
    "cuda_count",
    "select_device",
    "resolve_device",
    "full_float32",
    "tf32_overrides",
    "float32_report",
    "device_api",
    "check_dtype",
    "synchronize",
    "cast_actor",
]

_NPU_FAILURE: list = []  # why torch_npu could not be imported here (one line), once it was tried


def _import_torch_npu():
    """torch_npu (torch.npu), None when it is not installed or cannot start (the reason kept for the message). torch
    imports it itself through its backend autoload (core.extras.import_torch); it is imported here where that is off
    (TORCH_DEVICE_BACKEND_AUTOLOAD=0) and an NPU is asked for or probed."""
    import warnings

    if importlib.util.find_spec("torch_npu") is None:
        return None
    before_torch()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*owner.*")  # its directory-ownership warnings
            warnings.filterwarnings("ignore", message=".*group.*write.*")
            import torch_npu  # noqa: F401  (registers torch.npu)
    except (ImportError, RuntimeError, OSError) as exc:  # CANN's libraries not found: its environment not sourced
        if not _NPU_FAILURE:
            _NPU_FAILURE.append(f"torch_npu cannot start ({' '.join(str(exc).split())[:160]}); {CANN_ENV_HINT}")
        return None
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
        raise UsageError(
            f"--device {text}: {what} {index} does not exist ({count} available"
            + (
                f"; ASCEND_RT_VISIBLE_DEVICES={os.environ['ASCEND_RT_VISIBLE_DEVICES']}"
                if kind == "npu" and "ASCEND_RT_VISIBLE_DEVICES" in os.environ
                else ""
            )
            + ")"
        )
    return f"{kind}:{index}"


def _missing_backend(kind: str) -> str:
    if kind == "npu":
        if importlib.util.find_spec("torch_npu") is None:
            return "torch_npu is not installed (Ascend hosts: use CANN's torch/torch_npu)"
        if _NPU_FAILURE:
            return _NPU_FAILURE[0]
        return "torch_npu sees no NPU; check npu-smi info" + (
            f" and ASCEND_RT_VISIBLE_DEVICES={os.environ['ASCEND_RT_VISIBLE_DEVICES']!r}"
            if "ASCEND_RT_VISIBLE_DEVICES" in os.environ
            else ""
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
    Without these, camera policies' convolutions would round their inputs to a shortened mantissa on the accelerator.
    (Process-wide switches: set again by each engine on the device.)"""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif device.type == "npu":
        for group in ("conv", "matmul", "aclnn"):  # torch.npu.<group>.allow_hf32, where this torch_npu has it
            flags = getattr(torch.npu, group, None)
            if flags is not None and hasattr(flags, "allow_hf32"):
                flags.allow_hf32 = False


def tf32_overrides() -> list:
    """The environment variables set here that take TF32 out of torch's hands (NVIDIA's NGC containers set them):
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE (ATen/Context.h: a true value makes torch's starting float32 matmul precision
    "high", TF32; full_float32 then sets it back, and the flags are read back below) and NVIDIA_TF32_OVERRIDE (read by
    NVIDIA's libraries themselves, cuBLAS and cuDNN: 0 keeps TF32 off whatever a program sets)."""
    return [
        f"{name}={os.environ[name]}"
        for name in ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
        if name in os.environ
    ]


def float32_report(device, dtype: str) -> str:
    """What `dtype` runs as on `device`, read back from the switches (after full_float32)."""
    if dtype != "float32":
        return f"{dtype} (normalizers float32)"
    if device.type == "cpu":
        return "float32 (CPU)"
    if device.type == "cuda":
        on = [
            name
            for name, flag in (
                ("cuBLAS matmul", torch.backends.cuda.matmul.allow_tf32),
                ("cuDNN convolutions", torch.backends.cudnn.allow_tf32),
            )
            if flag
        ]
        env = tf32_overrides()
        return (
            "float32, TF32 "
            + (f"ON for {', '.join(on)}" if on else "off (cuBLAS matmul, cuDNN convolutions)")
            + (f"; set here: {', '.join(env)} (they may turn TF32 back on in NVIDIA's libraries)" if env else "")
        )
    if device.type == "npu":
        on = [
            group
            for group in ("conv", "matmul", "aclnn")
            if getattr(getattr(torch.npu, group, None), "allow_hf32", False)
        ]
        return f"float32, HF32 {'ON for ' + ', '.join(on) if on else 'off'}; {_npu_precision_mode(device)}"
    return "float32"


def _npu_precision_mode(device) -> str:
    """CANN's operator precision mode as torch_npu sets it (LazyInitAclops.cpp SetPrecisionMode): must_keep_origin_dtype
    on Ascend910B1 and later, allow_fp32_to_fp16 before (910A, 310P: matrix operators in float16), unless
    ACL_PRECISION_MODE was set through torch.npu.set_option. torch.npu.is_bf16_supported() is the same SoC test
    (NpuVariables.cpp IsBF16Supported: SocVersion >= Ascend910B1)."""
    name = _npu_name(device)
    try:
        newer = bool(torch.npu.is_bf16_supported())
    except Exception:
        return f"CANN precision mode unknown ({name})"
    if newer:
        return f"CANN precision mode must_keep_origin_dtype (torch_npu's default on {name})"
    return (
        f"CANN precision mode allow_fp32_to_fp16 (torch_npu's default on {name}, before Ascend910B1): matrix "
        f"operators run in float16, float32 parity within 1e-5 cannot hold"
    )


def _npu_name(device) -> str:
    try:
        return str(torch.npu.get_device_name(device.index or 0))
    except Exception:
        return "this NPU"


def check_dtype(device, dtype: str) -> None:
    """UsageError where the device cannot run `dtype`: bfloat16 on an NPU before Ascend910B1 (910A, 310P;
    torch.npu.is_bf16_supported())."""
    if device.type == "npu" and dtype == "bfloat16":
        try:
            supported = bool(torch.npu.is_bf16_supported())
        except Exception:
            return
        if not supported:
            raise UsageError(
                f"--dtype bfloat16: {_npu_name(device)} ({device}) has no bfloat16 (torch_npu: only "
                f"Ascend910B1 and later); use --dtype float16 or float32"
            )


def device_api(device):
    """torch's module for the device's streams, contexts and graphs (torch.cuda, torch.npu), None on the CPU."""
    if device.type == "cuda":
        return torch.cuda
    if device.type == "npu":
        return getattr(torch, "npu", None)
    return None


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
