"""inference.connect(): the policy's Python API over a serve connection, torch-free (docs/serve.md). Placeholder."""
from .errors import UsageError


def connect(address: str):
    raise UsageError("connect() is not built yet")
