"""Run trained Unity ML-Agents policies outside Unity: CPU, CUDA or Ascend NPU.

The package behind `inference.py` (the command line and `import inference`), one module per
concern in layers that import only downward (docs/architecture.md; pyproject.toml's
import-linter contract checks them). Importing it imports neither numpy nor torch.
"""
__version__ = "0.9.0"  # pyproject.toml reads it (setuptools, statically)
