"""onnxruntime sessions, torch-free: one InferenceSession on execution providers (tuned, threads, spinning) and
its errors in one line; the table of providers and the wheels that bring them."""

import re
from pathlib import Path
from typing import Optional

from .errors import UsageError

__all__ = ["PROVIDERS", "import_onnxruntime", "provider_wheel", "onnx_session", "ort_reason"]

# --providers' short names -> (onnxruntime's execution provider, the package that brings it)
PROVIDERS = {
    "cpu": ("CPUExecutionProvider", "onnxruntime"),
    "cuda": ("CUDAExecutionProvider", "onnxruntime-gpu"),
    "tensorrt": ("TensorrtExecutionProvider", "onnxruntime-gpu, with TensorRT's libraries"),
    "cann": ("CANNExecutionProvider", "onnxruntime-cann, with CANN"),
    "openvino": ("OpenVINOExecutionProvider", "onnxruntime-openvino"),
    "coreml": ("CoreMLExecutionProvider", "onnxruntime's macOS wheel"),
    "directml": ("DmlExecutionProvider", "onnxruntime-directml"),
    "rocm": ("ROCMExecutionProvider", "onnxruntime-rocm"),
    "migraphx": ("MIGraphXExecutionProvider", "onnxruntime-migraphx"),
    "qnn": ("QNNExecutionProvider", "onnxruntime-qnn"),
    "xnnpack": ("XnnpackExecutionProvider", "an onnxruntime built with XNNPACK"),
    "acl": ("ACLExecutionProvider", "an onnxruntime built with the Arm Compute Library"),
}


def import_onnxruntime():
    """onnxruntime, or a UsageError in one line: not installed, or installed but broken."""
    try:
        import onnxruntime as ort
    except ImportError as exc:  # (installed but broken is said as such, not as "not installed")
        import importlib.util

        raise UsageError(
            "onnxruntime is not installed (pip install onnxruntime)"
            if importlib.util.find_spec("onnxruntime") is None
            else f"onnxruntime cannot be imported ({str(exc).splitlines()[0][:160] if str(exc) else exc})"
        )
    return ort


def provider_wheel(provider: str) -> str:
    return next((wheel for name, wheel in PROVIDERS.values() if name == provider), "an onnxruntime build that has it")


def onnx_session(
    model_or_path,
    tuned: bool = True,
    threads: Optional[int] = None,
    label: Optional[str] = None,
    providers: Optional[list] = None,
    spin: bool = True,
):
    """An onnxruntime session, on the CPU or on `providers` (session_providers); `tuned` enables every graph
    optimisation; `spin` False: its intra-op threads sleep between runs instead of spin-waiting for the next one
    (onnxruntime's default), leaving the CPU to other processes (a server's clients: docs/serve.md, "Measured").
    A provider that does not start (onnxruntime would fall back to the CPU) is a UsageError."""
    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 4  # its warnings and errors would print beside ours (its errors raise, and are told)
    if tuned:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    source = model_or_path if isinstance(model_or_path, bytes) else str(model_or_path)
    providers = providers or ["CPUExecutionProvider"]
    try:
        session = ort.InferenceSession(source, options, providers=providers)
    except Exception as exc:
        raise UsageError(
            f"{label or (model_or_path if isinstance(model_or_path, (str, Path)) else 'model')}: "
            f"onnxruntime cannot load it ({ort_reason(exc)})"
        )
    first = providers[0] if isinstance(providers[0], str) else providers[0][0]
    if session.get_providers()[0] != first:
        raise UsageError(
            f"onnxruntime could not start {first} (it would run on {session.get_providers()[0]}); "
            f"check the device, its driver and the libraries {provider_wheel(first)} needs"
        )
    return session


def ort_reason(exc: Exception) -> str:
    """onnxruntime's message in one line, without its status code, the file's path again or its C++ source location."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : (Load model from .*? failed:)?", "", text)
    text = re.sub(r"^\S*onnxruntime\S*:\d+ [^(]*\([^)]*\) ", "", text)
    return text if len(text) <= 200 else text[: text.rfind(". ", 0, 200) + 1] or text[:200] + "..."
