"""Devices and engines: --device parsing and selection (CPU, CUDA, Ascend NPU through torch_npu),
full float32 (TF32 and HF32 off), and the two engines over the same modules' outputs
(EngineHeads): torch (device graphs on CUDA/NPU) and onnxruntime (CPU float32)."""
import importlib.util

from ..core.errors import UsageError
from ..core.spec import ENGINES


def choose_engine(name: str, device, dtype: str) -> str:
    """auto: onnxruntime on the CPU in float32 (faster there), torch everywhere else."""
    has_ort = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None
    if name == "onnxruntime":
        if device.type != "cpu":
            raise UsageError(f"--engine onnxruntime runs on the CPU; for {device} use --engine torch or auto")
        if dtype != "float32":
            raise UsageError(f"--engine onnxruntime runs float32 only; use --engine torch for --dtype {dtype}")
        if not has_ort:
            raise UsageError("--engine onnxruntime: onnxruntime and onnx are not installed")
        return name
    if name not in ("auto", "torch"):
        raise UsageError(f"engine {name!r}: expected one of {', '.join(ENGINES)}")
    return "onnxruntime" if name == "auto" and device.type == "cpu" and dtype == "float32" and has_ort else "torch"

