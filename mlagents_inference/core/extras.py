"""Optional packages, asked for where they are needed: whether torch is here (without importing it), onnxruntime
and pyarrow imported with one-line errors."""

from .errors import UsageError

__all__ = ["import_pyarrow", "TORCH_HINT", "torch_available"]


def import_pyarrow():
    """pyarrow, an optional dependency: imported on the Parquet path only."""
    try:
        import pyarrow
        import pyarrow.compute  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise UsageError("Parquet files need pyarrow, which is not installed: pip install pyarrow")
    return pyarrow


TORCH_HINT = 'pip install ".[torch]" (or pip install torch; Ascend hosts: CANN\'s torch and torch_npu)'


def torch_available() -> bool:
    """Whether torch can be imported here, without importing it (sys.modules["torch"] = None counts as absent)."""
    import sys

    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
