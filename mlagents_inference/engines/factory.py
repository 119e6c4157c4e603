"""The one engine factory: which device and engine run a loaded policy (torch, or onnxruntime on its execution
providers) and the engine built. Importable without torch: the torch layer is imported only when a torch device is
resolved or a torch engine built. Policy, load() and the run context all go through here. The engines are read from a
table, ENGINE_CLASSES (a class named "module:Class", imported when it is built), each honouring the Engine protocol."""

import importlib
import importlib.util
from typing import Optional, Protocol

from ..core.errors import UsageError
from ..core.extras import TORCH_HINT
from ..core.spec import ENGINES
from .devices import OrtDevice, onnxruntime_devices, ort_device, session_providers

__all__ = [
    "Engine",
    "ENGINE_CLASSES",
    "engine_class",
    "choose_engine",
    "pick_device",
    "engine_name",
    "make_engine",
    "engine_report",
    "graph_calls_text",
]


class Engine(Protocol):
    """What runs a policy's network: run(flat, names) answers core.spec.engine_output_names for the engine's arrays
    (observations, masks, memory: Policy.prepare's), `name` is what info and --stream-stats call it, and
    `rows_independent` whether each row's answer is independent of the other rows of its call (then serve and the
    stream answer many lines in one call: services.protocol.answer_waiting)."""

    name: str
    rows_independent: bool

    def run(self, flat: list, names: Optional[list] = None) -> dict: ...


ENGINE_CLASSES = {  # kind -> its class, "module:Class" (imported when built: torch only for the torch engine)
    "onnxruntime": "mlagents_inference.engines.onnx_engine:OnnxRuntimeEngine",  # ML-Agents' modules, exported once
    "onnx_file": "mlagents_inference.loaders.onnx_file:MLAgentsOnnx",  # the ML-Agents ONNX itself (torch-free)
    "torch": "mlagents_inference.engines.torch_engine:TorchEngine",
}


def engine_class(kind: str) -> type:
    """ENGINE_CLASSES' class for `kind`, imported."""
    module, name = ENGINE_CLASSES[kind].split(":")
    return getattr(importlib.import_module(module), name)


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


def pick_device(device, engine: str = "auto", providers: Optional[list] = None, file_policy: bool = False):
    """The device a policy runs on: onnxruntime's (OrtDevice) where a device named by text means its providers
    (without torch, with engine onnxruntime or providers: devices.onnxruntime_devices; or a policy that runs as its
    ML-Agents file), else torch's (a torch.device, checked to exist: 'meta' or an absent GPU refused). An OrtDevice
    is kept."""
    if isinstance(device, OrtDevice):
        return device
    if isinstance(device, str) and (file_policy or onnxruntime_devices(engine, providers)):
        return ort_device(device)
    from .torch_devices import resolve_device

    return resolve_device(str(device))


def engine_name(device, engine: str, dtype: str) -> str:
    """The engine that runs on `device` (pick_device's): onnxruntime on onnxruntime's devices, else choose_engine."""
    return "onnxruntime" if isinstance(device, OrtDevice) else choose_engine(engine, device, dtype)


def make_engine(
    checkpoint,
    device="cpu",
    dtype: str = "float32",
    engine: str = "auto",
    graphs: bool = True,
    providers: Optional[list] = None,
    spin: bool = True,
    compile: bool = False,
    threads: Optional[int] = None,
) -> tuple:
    """(engine, device, engine name) for a loaded policy: its ML-Agents ONNX file itself where it has no modules (the
    torch-free install), ML-Agents' modules on onnxruntime (exported once) or on torch. UsageError for a combination
    that cannot run, naming what to install."""
    actor = checkpoint.actor
    if compile and (actor is None or engine == "onnxruntime" or providers):
        raise UsageError("--compile on applies to the torch engine (--engine torch), not onnxruntime")
    if actor is None or engine == "onnxruntime" or providers:  # onnxruntime's devices (providers)
        if actor is None and (engine == "torch" or dtype != "float32"):
            raise UsageError(
                f"--engine {engine} --dtype {dtype}" + (" with --providers" if providers else "") + ": "
                "onnxruntime runs float32 only, on its providers; other engines and precisions need "
                f"torch: {TORCH_HINT}"
            )
        if dtype != "float32":
            raise UsageError(
                f"--engine {engine} --dtype {dtype}: onnxruntime runs float32 only; use --engine torch "
                f"for --dtype {dtype}" + (" (without --providers)" if providers else "")
            )
        if engine != "onnxruntime" and actor is not None:
            raise UsageError(f"--providers applies to --engine onnxruntime, not --engine {engine}")
        device = device if isinstance(device, OrtDevice) else ort_device(str(device))
        ort_providers = session_providers(device, providers)
        if actor is None:  # the ML-Agents file itself
            made = engine_class("onnx_file")(
                checkpoint.path, checkpoint.settings, threads, providers=ort_providers, sampling=True, spin=spin
            )
            return made, device, made.name
        made = engine_class("onnxruntime")(actor, ort_providers, spin, graphs, threads)
        return made, device, made.name
    device = device if type(device).__module__ == "torch" else pick_device(device, engine, providers)
    name = choose_engine(engine, device, dtype)
    if compile and name != "torch":
        raise UsageError("--compile on applies to the torch engine (--engine torch), not onnxruntime")
    if name == "onnxruntime":
        return engine_class("onnxruntime")(actor, spin=spin, threads=threads), device, name
    return engine_class("torch")(actor, device, dtype, graphs, compile=compile, threads=threads), device, name


def engine_report(engine) -> dict:
    """What an engine runs, for info, precision and benchmark: "precision" (what float32 runs as, read back from the
    switches or from the options the provider took) and "graphs" (the torch engine's device graphs: whether they run,
    and why not; None where there are none: the CPU, onnxruntime) and "graph_calls" (with them: {"captures",
    "replays", "eager"}, the buckets captured and the calls answered by a replay and eager so far) and "compiled" (the
    torch engine's --compile: whether the compiled module runs, and why not; None on onnxruntime)."""
    session = getattr(engine, "session", None)
    if session is not None:
        from ..core.sessions import provider_precision

        calls = getattr(engine, "counts", None)  # (onnxruntime's CUDA graphs)
        return {
            "precision": provider_precision(session),
            "graphs": getattr(engine, "graph_state", None),
            "graph_calls": calls and dict(calls),
            "compiled": None,
        }
    state = getattr(engine, "graph_state", None)
    calls = getattr(engine, "counts", None) if state is not None else None
    return {
        "precision": getattr(engine, "precision", None),
        "graphs": state,
        "graph_calls": calls and dict(calls),
        "compiled": getattr(engine, "compile_state", None),
    }


def graph_calls_text(engine, sep: str = ":", join: str = ",") -> str:
    """The torch engine's graph counts as the --stream-stats line shows them ("captures:3,replays:90,eager:0"); ""
    where the engine has no device graphs."""
    calls = engine_report(engine)["graph_calls"]
    return join.join(f"{key}{sep}{value}" for key, value in calls.items()) if calls else ""
