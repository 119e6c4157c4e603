"""onnxruntime sessions, torch-free: one InferenceSession on execution providers (tuned, threads, spinning, float32
kept float32 on the accelerators' providers) and its errors in one line; the table of providers and the wheels that
bring them; which onnxruntime builds are installed (exactly one may be)."""

import os
import re
import sys
from pathlib import Path
from typing import Optional

from .errors import UsageError

__all__ = [
    "PROVIDERS",
    "FLOAT32_OPTIONS",
    "import_onnxruntime",
    "onnxruntime_builds",
    "onnxruntime_distributions",
    "provider_wheel",
    "float32_providers",
    "onnx_session",
    "provider_precision",
    "ort_reason",
    "CUDA_GRAPH_OPTION",
    "with_cuda_graph",
    "runs_cuda_graphs",
]

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

# The provider options that keep float32 float32, per provider: alternatives in the order tried (a release that does not
# know a key refuses the session with 'Unknown provider option: "KEY"', provider_options_utils.h; the next is tried).
# - CUDA: use_tf32 defaults to true (cuda_execution_provider_info.h: "By default, enable TF32 to speed up float
#   GEMM/MatMul or cuDNN convolution"; onnxruntime PRs #19357, #19426): 0 keeps float32 matrix products in float32.
# - CANN: enable_cann_graph defaults to true and its graph engine is given a precision mode only when one is set
#   (cann_graph.cc), else CANN's default, force_fp16 (ATC's --precision_mode; --precision_mode_v2's default is fp16):
#   float32 would run as float16. onnxruntime-cann 1.24.4 (the newest cp311 wheel) takes precision_mode (read from its
#   provider library's option parser); onnxruntime's main branch names it precision_mode_v2, whose value is "origin".
# - OpenVINO: without device_type its build's default device runs (the CPU for the PyPI wheel: onnxruntime's OpenVINO
#   page, "By default, Intel CPU is used"); it is named, so that what runs is what is reported. --device does not reach
#   an Intel GPU or NPU.
FLOAT32_OPTIONS = {
    "CUDAExecutionProvider": ({"use_tf32": "0"},),
    "CANNExecutionProvider": ({"precision_mode": "must_keep_origin_dtype"}, {"precision_mode_v2": "origin"}),
    "OpenVINOExecutionProvider": ({"device_type": "CPU"},),
}

_CHECKED_BUILDS: list = []  # [True] once this process has checked that one onnxruntime build is installed


def import_onnxruntime():
    """onnxruntime, or a UsageError in one line: not installed, installed but broken, or installed twice (onnxruntime
    beside onnxruntime-gpu or -cann: they share the folder onnxruntime/ and cannot co-exist,
    microsoft/onnxruntime#26996; which files won is anyone's guess)."""
    if not _CHECKED_BUILDS:
        builds = onnxruntime_builds()
        if len(builds) > 1:
            names = " ".join(name for name, _ in builds)
            raise UsageError(
                f"onnxruntime is installed more than once in one folder ({', '.join(f'{n} {v}' for n, v in builds)}):"
                f" their files overwrite each other; keep exactly one: pip uninstall -y {names}, then "
                f"pip install the one you want (docs/setup.md)"
            )
        _CHECKED_BUILDS.append(True)
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


def onnxruntime_builds(distributions=None) -> list:
    """[(distribution name, version)] of the installed distributions that put the package onnxruntime into the same
    folder (onnxruntime, onnxruntime-gpu, onnxruntime-cann, ...), read from their metadata (top_level.txt, else the
    files they installed; onnxruntime-genai and -extensions install other packages). One in each folder is right; two
    in one folder have overwritten each other's files. `distributions`: onnxruntime_distributions() by default."""
    found: dict = {}
    for dist in onnxruntime_distributions() if distributions is None else distributions:
        try:
            top = (dist.read_text("top_level.txt") or "").split()
            files = [] if top else [str(f) for f in (dist.files or [])[:2000]]
            if "onnxruntime" not in top and not any(f.startswith("onnxruntime/") for f in files):
                continue
            name = dist.metadata["Name"]
            where = os.path.normcase(os.path.realpath(str(dist.locate_file(""))))
        except Exception:  # (a broken distribution's metadata: not this check's business)
            continue
        key = re.sub(r"[-_.]+", "-", str(name)).lower()
        found.setdefault(where, {}).setdefault(key, (str(name), str(dist.version)))
    return max((sorted(group.values()) for group in found.values()), key=len, default=[])


def onnxruntime_distributions() -> list:
    """The installed distributions whose names say they may be an onnxruntime build (onnxruntime*, ort-nightly*), found
    by their metadata folders on sys.path: a few file-system lookups, where reading every installed distribution's
    metadata would cost a start-up (about 0.4 s measured here)."""
    import glob
    from importlib.metadata import Distribution

    out = []
    for entry in dict.fromkeys(os.path.abspath(p or ".") for p in sys.path):
        if os.path.isdir(entry):
            for pattern in ("onnxruntime*.dist-info", "ort_nightly*.dist-info"):
                out += [Distribution.at(info) for info in sorted(glob.glob(os.path.join(glob.escape(entry), pattern)))]
    return out


def provider_wheel(provider: str) -> str:
    return next((wheel for name, wheel in PROVIDERS.values() if name == provider), "an onnxruntime build that has it")


def float32_providers(providers: list, choice: Optional[dict] = None) -> list:
    """`providers` (names, or (name, options)) with FLOAT32_OPTIONS added where a provider has them (`choice`: provider
    -> which alternative; the first by default). Options already given are kept."""
    out = []
    for entry in providers:
        name, given = (entry, {}) if isinstance(entry, str) else (entry[0], dict(entry[1]))
        alternatives = FLOAT32_OPTIONS.get(name)
        if not alternatives:
            out.append(entry)
            continue
        out.append((name, {**alternatives[(choice or {}).get(name, 0)], **given}))
    return out


def _unknown_option(exc: Exception, providers: list, choice: dict) -> Optional[str]:
    """The provider whose float32 option this onnxruntime does not know (it named it), its next alternative chosen in
    `choice`; None when the error is something else. UsageError when the provider has no alternative left."""
    m = re.search(r'Unknown provider option: "([^"]+)"', str(exc))
    if not m:
        return None
    for entry in providers:
        name = entry if isinstance(entry, str) else entry[0]
        alternatives = FLOAT32_OPTIONS.get(name, ())
        at = choice.get(name, 0)
        if at < len(alternatives) and m.group(1) in alternatives[at]:
            if at + 1 < len(alternatives):
                choice[name] = at + 1
                return name
            keys = " or ".join(k for a in alternatives for k in a)
            raise UsageError(
                f"this {provider_wheel(name).split(',')[0]} does not take {keys}: its {name} would not keep "
                f"float32 as float32 ({_LOW_PRECISION.get(name, 'lower precision')}); install a release that does"
            )
    return None


_LOW_PRECISION = {
    "CANNExecutionProvider": "CANN's graph engine defaults to force_fp16",
    "CUDAExecutionProvider": "TF32 on by default, on Ampere and newer GPUs",
    "OpenVINOExecutionProvider": "its build's default device",
}


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
    The accelerators' providers get FLOAT32_OPTIONS (the key this onnxruntime knows). A provider that does not start
    is a UsageError: onnxruntime's own fallback to the CPU is switched off (it prints a banner on stdout and runs
    elsewhere than asked), and a session that would still run on another provider is refused."""
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
    first = providers[0] if isinstance(providers[0], str) else providers[0][0]
    choice: dict = {}
    while True:
        try:  # (enable_fallback: an InferenceSession keyword; releases without it ignore it)
            session = ort.InferenceSession(
                source, options, providers=float32_providers(providers, choice), enable_fallback=0
            )
            break
        except Exception as exc:
            if _unknown_option(exc, providers, choice):
                continue
            if first != "CPUExecutionProvider" and _loads_on_cpu(ort, source, options):
                raise UsageError(
                    f"onnxruntime could not start {first} ({ort_reason(exc)}); check the device, its "
                    f"driver and the libraries {provider_wheel(first)} needs"
                )
            raise UsageError(
                f"{label or (model_or_path if isinstance(model_or_path, (str, Path)) else 'model')}: "
                f"onnxruntime cannot load it ({ort_reason(exc)})"
            )
    if session.get_providers()[0] != first:
        raise UsageError(
            f"onnxruntime could not start {first} (it would run on {session.get_providers()[0]}); "
            f"check the device, its driver and the libraries {provider_wheel(first)} needs"
        )
    return session


def _loads_on_cpu(ort, source, options) -> bool:
    """Whether the model loads on the CPU alone (then a failure with providers is the provider's)."""
    try:
        ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        return True
    except Exception:
        return False


def provider_precision(session) -> str:
    """What float32 runs as on the session's first provider, read back from the options the provider took
    (get_provider_options), and the environment variables that change it."""
    first = session.get_providers()[0]
    taken = dict(session.get_provider_options().get(first, {}))
    tf32_env = os.environ.get("NVIDIA_TF32_OVERRIDE")
    env = f"; NVIDIA_TF32_OVERRIDE={tf32_env} is set (NVIDIA's libraries read it; 0 keeps TF32 off)" if tf32_env else ""
    if first == "CPUExecutionProvider":
        return "float32 (CPUExecutionProvider)"
    if first == "CUDAExecutionProvider":
        state = (
            "TF32 off (use_tf32=0)"
            if taken.get("use_tf32") == "0"
            else f"TF32 on (use_tf32={taken.get('use_tf32', 'its default, 1')}): matrix products in a 10-bit mantissa"
        )
        return f"float32, {state} (CUDAExecutionProvider){env}"
    if first == "CANNExecutionProvider":
        key = "precision_mode_v2" if "precision_mode_v2" in taken else "precision_mode"
        mode = taken.get(key) or None
        kept = mode in ("must_keep_origin_dtype", "origin")
        graph = taken.get("enable_cann_graph", "1") not in ("0", "false", "False")
        return (
            f"float32 {'kept' if kept else 'NOT kept'} ({key} {mode or 'not set: CANN default force_fp16'}) on "
            f"CANNExecutionProvider"
            + (
                "; graph engine on: batch sizes padded to fixed buckets (1, 2, 4, ..., 64, then four an octave), "
                "each bucket compiled on its first call and reused"
                if graph
                else "; single operators"
            )
        )
    if first == "TensorrtExecutionProvider":
        return (
            "float32 with TF32 allowed (TensorRT's default; NVIDIA_TF32_OVERRIDE=0 at start turns it off) on "
            f"TensorrtExecutionProvider{env}"
        )
    if first == "OpenVINOExecutionProvider":
        device = taken.get("device_type") or "its build's default (the CPU for the PyPI wheel)"
        return (
            f"float32 on OpenVINOExecutionProvider, device_type {device} (--device does not reach an Intel GPU or NPU)"
        )
    return f"float32 as {first} runs it (not checked here)"


def ort_reason(exc: Exception) -> str:
    """onnxruntime's message in one line, without its status code, the file's path again or its C++ source location."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : (Load model from .*? failed:)?", "", text)
    text = re.sub(r"^\S*onnxruntime\S*:\d+ [^(]*\([^)]*\) ", "", text)
    return text if len(text) <= 200 else text[: text.rfind(". ", 0, 200) + 1] or text[:200] + "..."


# onnxruntime's CUDA provider captures a CUDA graph of a run and replays it (cuda_execution_provider_info.cc's
# kEnableCudaGraph, default false); its inputs and outputs must stay at the same device addresses (I/O binding), and the
# run option "gpu_graph_id" names one graph among several (onnxruntime_run_options_config_keys.h: -1 skips capture and
# replay for that run, 0 is reserved).
CUDA_GRAPH_OPTION = {"enable_cuda_graph": "1"}


def with_cuda_graph(providers: list) -> list:
    """`providers` with CUDA_GRAPH_OPTION added to the CUDA provider's options (others unchanged)."""
    out = []
    for entry in providers:
        name, given = (entry, {}) if isinstance(entry, str) else (entry[0], dict(entry[1]))
        out.append((name, {**given, **CUDA_GRAPH_OPTION}) if name == "CUDAExecutionProvider" else entry)
    return out


def runs_cuda_graphs(session) -> bool:
    """Whether a session's first provider is CUDA with its graphs on (the options it took, read back)."""
    try:
        first = session.get_providers()[0]
        taken = session.get_provider_options().get(first, {})
    except Exception:
        return False
    return first == "CUDAExecutionProvider" and str(taken.get("enable_cuda_graph", "0")) in ("1", "true", "True")
