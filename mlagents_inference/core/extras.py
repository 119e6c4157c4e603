"""Optional packages, asked for where they are needed: whether torch is here (and torch imported with what must come
before it: on an Ascend host `import torch` also imports torch_npu), and pyarrow imported with a one-line error."""

import os
import sys
from typing import Optional

from .errors import UsageError

__all__ = [
    "import_pyarrow",
    "TORCH_HINT",
    "CANN_ENV_HINT",
    "REQUIRED",
    "missing_package",
    "before_torch",
    "import_torch",
    "torch_available",
]


def import_pyarrow():
    """pyarrow, an optional dependency: imported on the Parquet path only."""
    try:
        import pyarrow
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise UsageError("Parquet files need pyarrow, which is not installed: pip install pyarrow")
    return pyarrow


# What the program needs installed, as pyproject.toml's dependencies say (tests/test_install.py holds them equal):
# {module: requirement}. A .pyz or a copied clone has no requirements.txt beside it, so a missing one is named.
REQUIRED = {
    "numpy": "numpy>=1.24",
    "onnx": "onnx>=1.16",
    "ml_dtypes": "ml_dtypes<0.6",
    "onnxruntime": "onnxruntime>=1.17",
    "huggingface_hub": "huggingface_hub>=0.23",
    "tqdm": "tqdm>=4.60",
    "PIL": "Pillow>=9",
}

_PIP_NAMES = {"PIL": "Pillow", "yaml": "PyYAML", "google": "protobuf", "prometheus_client": "prometheus-client"}


def missing_package(module: Optional[str]) -> str:
    """The one line for a package that is not installed (module: ModuleNotFoundError's name), naming what to install:
    every required package not found here, with its version (numpy missing: the rest likely are too), torch's hint, or
    the package itself."""
    import importlib.util

    top = (module or "?").split(".")[0]
    if top == "torch":
        hint = TORCH_HINT
    elif top in REQUIRED:
        missing = []
        for name, requirement in REQUIRED.items():
            try:
                absent = name == top or importlib.util.find_spec(name) is None
            except (ImportError, ValueError):
                absent = True
            if absent:
                missing.append(f'"{requirement}"' if "<" in requirement or ">" in requirement else requirement)
        hint = "pip install " + " ".join(missing)
    else:
        hint = f"pip install {_PIP_NAMES.get(top, top)}"
    return f"the Python package '{module}' is not installed; run: {hint}"


TORCH_HINT = 'pip install ".[torch]" (or pip install torch; Ascend hosts: CANN\'s torch and torch_npu)'

# What to do when torch's backend autoload (torch_npu) fails: CANN's environment, or torch without its extensions
CANN_ENV_HINT = (
    "source CANN's set_env.sh first (e.g. source /usr/local/Ascend/ascend-toolkit/set_env.sh), "
    "or run on the CPU with TORCH_DEVICE_BACKEND_AUTOLOAD=0"
)


def before_torch() -> None:
    """What must be set before torch is imported. torch_npu registers itself as torch's backend autoload (its
    setup.py: entry point group `torch.backends`, `torch_npu = torch_npu:_autoload`; torch/__init__.py
    `_import_device_backends`), so `import torch` imports torch_npu and starts CANN: CANN's log level must be set
    before that (errors only, as the original NPU adaptation set it; a value the host set is kept)."""
    os.environ.setdefault("ASCEND_GLOBAL_LOG_LEVEL", "3")


def import_torch():
    """torch, imported through before_torch, with torch_npu's import-time warnings about its folders' ownership
    silenced (they would print beside the one line that tells). torch raises "Failed to load the backend extension:
    torch_npu" when torch_npu cannot start (CANN's environment not sourced: libascendcl.so or libhccl.so not found),
    for every device, the CPU included: that is a UsageError saying what to do."""
    import importlib
    import warnings

    if sys.modules.get("torch") is not None:
        return sys.modules["torch"]
    before_torch()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*owner.*")  # torch_npu: directory-ownership warnings
        warnings.filterwarnings("ignore", message=".*group.*write.*")
        try:
            return importlib.import_module("torch")  # (here, and not at the top: the torch-free core imports no torch)
        except RuntimeError as exc:
            if "backend extension" not in str(exc):
                raise
            cause = exc.__cause__
            reason = " ".join(str(cause or exc).split())[:160]
            raise UsageError(
                f"torch cannot start: its backend extension failed to load ({reason}); {CANN_ENV_HINT}"
            ) from None


def torch_available() -> bool:
    """Whether torch can be imported here (sys.modules["torch"] = None counts as absent). Where it is installed it is
    imported here, through import_torch (what comes first set first; a torch that cannot start is a UsageError): every
    path that asks goes on to import it, and an Ascend host's `import torch` is where torch_npu starts."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
    if found:
        import_torch()
    return found
