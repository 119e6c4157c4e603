"""Devices and engines: --device parsing and selection (CPU, CUDA, Ascend NPU through torch_npu),
full float32 (TF32 and HF32 off), and the two engines over the same modules' outputs
(EngineHeads): torch (device graphs on CUDA/NPU) and onnxruntime (CPU float32)."""
import copy
import importlib.util
import os
import warnings
from typing import Callable, Optional

import torch

from .encoders import Normalizer
from .errors import UsageError
from .networks import EngineHeads, SimpleActor
from .runtime import onnx_session, parse_device
from .serializer import export_engine_onnx
from .spec import ENGINES, engine_output_names, input_names


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


def _cuda_count() -> int:
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
        return ("torch_npu is not installed (Ascend hosts: use CANN's torch/torch_npu)"
                if importlib.util.find_spec("torch_npu") is None else "torch_npu sees no NPU; check npu-smi info")
    return "a CPU-only torch build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build sees no GPU"


def resolve_device(text: str):
    """A torch.device for --device, checking that it exists."""
    device = torch.device(select_device(text, npu_count, _cuda_count))
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


class TorchEngine:
    """The policy's modules on cpu/cuda/npu. On CUDA (and on NPU where torch_npu has graph
    capture: not yet run on hardware) each batch size is captured once as a device graph."""
    name = "torch"

    def __init__(self, actor: "SimpleActor", device, dtype: str, graphs: bool = True):
        self.device, self.dtype = device, getattr(torch, dtype)
        self.heads = EngineHeads(cast_actor(copy.deepcopy(actor), self.dtype).to(device)).eval()
        self.output_names = engine_output_names(actor.settings)
        self.graphs: dict = {}
        api = torch.cuda if device.type == "cuda" else getattr(torch, "npu", None) if device.type == "npu" else None
        self.graph_cls = getattr(api, "CUDAGraph" if device.type == "cuda" else "NPUGraph", None) if api else None
        self.graph_api = api if graphs and self.graph_cls is not None and hasattr(api, "graph") else None

    def _forward(self, tensors: list):
        return self.heads(*tensors)

    def _captured(self, shapes: tuple):
        """(static inputs, static outputs, graph) for one set of input shapes, captured on first use."""
        if shapes not in self.graphs and len(self.graphs) < 8:
            static_in = [torch.zeros(shape, device=self.device) for shape in shapes]
            if self.heads.discrete:
                static_in[self.heads.n_inputs] += 1.0  # all allowed while warming up
            stream = self.graph_api.Stream(device=self.device)
            stream.wait_stream(self.graph_api.current_stream(self.device))
            with self.graph_api.stream(stream), torch.inference_mode():
                for _ in range(3):
                    self._forward(static_in)
            self.graph_api.current_stream(self.device).wait_stream(stream)
            graph = self.graph_cls()
            with torch.inference_mode(), self.graph_api.graph(graph):
                static_out = self._forward(static_in)
            self.graphs[shapes] = (static_in, static_out, graph)
        return self.graphs.get(shapes)

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        """Engine inputs (float32 numpy, in input_names order) -> the outputs `names` (all
        by default) as numpy; only those are copied to the host."""
        names = self.output_names if names is None else names
        host = [torch.from_numpy(x if x.flags.writeable else x.copy()) for x in flat]  # e.g. a read-only memory map
        if self.graph_api is not None:
            try:
                captured = self._captured(tuple(tuple(x.shape) for x in flat))
            except Exception:  # capture unsupported here: stay eager from now on
                self.graph_api, captured = None, None
            if captured:
                static_in, static_out, graph = captured
                for dst, src in zip(static_in, host):
                    dst.copy_(src, non_blocking=False)
                graph.replay()
                return self._to_host(static_out, names)
        with torch.inference_mode():
            return self._to_host(self._forward([x.to(self.device) for x in host]), names)

    def _to_host(self, outs, names: list) -> dict:
        """The outputs `names` as numpy (.cpu() waits for the device)."""
        return {name: out.cpu().numpy() for name, out in zip(self.output_names, outs) if name in names}


class OnnxRuntimeEngine:
    """The same modules exported (deterministic outputs only) and run by onnxruntime on the CPU, float32 only."""
    name = "onnxruntime"

    def __init__(self, actor: "SimpleActor", providers: Optional[list] = None, spin: bool = True):
        self.output_names, self.input_names = engine_output_names(actor.settings), input_names(actor.settings)
        self.session = onnx_session(export_engine_onnx(EngineHeads(actor)), providers=providers, spin=spin)
        self.providers = self.session.get_providers()
        # InferenceSession.run re-checks on every call what is fixed here (input names, OrtValue
        # ownership, graph capture) through pybind properties: 5-10 µs a call once a run has left the
        # caches cold, a tenth of a small visual policy's batch-1 call. The binding's run skips that.
        binding = getattr(self.session, "_sess", None)
        self._run = binding.run if callable(getattr(binding, "run", None)) else self.session.run

    def run(self, flat: list, names: Optional[list] = None) -> dict:
        names = self.output_names if names is None else names
        return dict(zip(names, self._run(names, dict(zip(self.input_names, flat)), None)))


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
