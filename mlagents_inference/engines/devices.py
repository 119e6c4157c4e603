"""Devices, torch-free: --device parsed, onnxruntime's execution providers for a device and --providers
(OrtDevice, session_providers), and when a device means onnxruntime's providers."""

import re
from dataclasses import dataclass
from typing import Optional

from ..core.errors import UsageError
from ..core.extras import torch_available
from ..core.sessions import PROVIDERS, import_onnxruntime, provider_wheel

__all__ = [
    "onnxruntime_devices",
    "parse_device",
    "DEVICE_PROVIDER",
    "parse_providers",
    "OrtDevice",
    "ort_device",
    "host_has_device",
    "visible_devices",
    "session_providers",
]


def onnxruntime_devices(engine: str, providers) -> bool:
    """Whether a device means onnxruntime's providers: without torch, or with --engine onnxruntime or --providers."""
    return engine == "onnxruntime" or bool(providers) or not torch_available()


def parse_device(text: str) -> tuple:
    """'auto' | 'cpu' | 'cuda[:N]' | 'npu[:N]' -> (kind, index or None)."""
    m = re.fullmatch(r"(auto|cpu|cuda|npu)(?::(\d+))?", text.strip().lower())
    if not m or (m.group(1) in ("auto", "cpu") and m.group(2) is not None):
        raise UsageError(f"--device {text!r}: expected auto, cpu, cuda[:N] or npu[:N]")
    return m.group(1), int(m.group(2)) if m.group(2) is not None else None


DEVICE_PROVIDER = {"cuda": "CUDAExecutionProvider", "npu": "CANNExecutionProvider"}


_TAKES_DEVICE_ID = {
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "CANNExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
}


def parse_providers(text: str) -> list:
    """--providers NAME[,NAME...]: short names (cuda, tensorrt, cann, openvino, ...) or onnxruntime's own, in order."""
    full = {name.lower(): name for name, _ in PROVIDERS.values()}
    out = []
    for word in (w.strip() for w in text.split(",")):
        name = PROVIDERS[word.lower()][0] if word.lower() in PROVIDERS else full.get(word.lower())
        if name is None:
            raise UsageError(
                f"--providers: unknown execution provider {word[:60]!r}; expected one of "
                f"{', '.join(PROVIDERS)} (or onnxruntime's names, e.g. CUDAExecutionProvider)"
            )
        if name in out:
            raise UsageError(f"--providers: {name} is named twice")
        out.append(name)
    return out


def _check_available(provider: str, what: str) -> None:
    available = import_onnxruntime().get_available_providers()
    if provider not in available:
        raise UsageError(
            f"{what}: this onnxruntime has no {provider} (it has {', '.join(available)}); "
            f"install {provider_wheel(provider)} in place of onnxruntime"
        )


@dataclass(frozen=True)
class OrtDevice:
    """A device as onnxruntime's execution providers reach it (the torch-free install's torch.device)."""

    type: str  # cpu | cuda | npu
    index: Optional[int] = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


def ort_device(text: str) -> OrtDevice:
    """--device through onnxruntime's providers: cuda[:N] its CUDA provider, npu[:N] its CANN provider; auto takes
    CANN, else CUDA, where this onnxruntime has them, else the CPU."""
    kind, index = parse_device(text)
    if kind == "auto":  # (a GPU wheel on a host without the device: the CPU, not a provider that cannot start)
        available = import_onnxruntime().get_available_providers()
        kind = next((k for k in ("npu", "cuda") if DEVICE_PROVIDER[k] in available and host_has_device(k)), "cpu")
    elif kind != "cpu":
        _check_available(DEVICE_PROVIDER[kind], f"--device {text}")
    return OrtDevice(kind, None if kind == "cpu" else index or 0)


def host_has_device(kind: str) -> bool:
    """Whether this host shows a device of `kind` (Linux: its device files, less what CUDA_VISIBLE_DEVICES or
    ASCEND_RT_VISIBLE_DEVICES hide; elsewhere taken as there)."""
    count = visible_devices(kind)
    return count is None or count > 0


def visible_devices(kind: str):
    """How many devices of `kind` this process may use, where the host tells (None: not known, not Linux). The
    device files (/dev/nvidia[0-9]*, /dev/davinci[0-9]*) narrowed by CUDA_VISIBLE_DEVICES, or for NPUs
    ASCEND_RT_VISIBLE_DEVICES (CANN's runtime: the NPUs a process sees, numbered from 0 in the order listed): empty
    or -1 hides them all."""
    import glob
    import os
    import sys

    listed = os.environ.get("CUDA_VISIBLE_DEVICES" if kind == "cuda" else "ASCEND_RT_VISIBLE_DEVICES")
    entries = None if listed is None else [e for e in (e.strip() for e in listed.split(",")) if e]
    if listed is not None and listed.strip() in ("", "-1"):
        return 0
    if sys.platform != "linux":
        return None if entries is None else len(entries)
    files = len(glob.glob("/dev/davinci[0-9]*" if kind == "npu" else "/dev/nvidia[0-9]*"))
    return files if entries is None else min(files, len(entries))


def session_providers(device: Optional[OrtDevice] = None, names: Optional[list] = None) -> list:
    """onnxruntime's providers for a device and --providers (in priority order), the CPU last as the fallback; the
    device's index goes to the providers that take one. UsageError naming the wheel for one this build lacks."""
    device, given = device or OrtDevice("cpu"), bool(names)
    names = list(names) if names else ([DEVICE_PROVIDER[device.type]] if device.type != "cpu" else [])
    out = []
    for name in names:
        _check_available(name, "--providers" if given else f"--device {device}")
        out.append(
            (name, {"device_id": str(device.index)}) if name in _TAKES_DEVICE_ID and device.index is not None else name
        )
    return out + ([] if "CPUExecutionProvider" in names else ["CPUExecutionProvider"])
