"""Run trained Unity ML-Agents policies outside Unity: CPU, CUDA or Ascend NPU.

The package behind inference.py: one module per concern, in layers (docs/architecture.md). Imports no numpy or torch."""

__all__ = ["__version__"]
__version__ = "0.9.0"  # pyproject.toml reads it (setuptools, statically)
