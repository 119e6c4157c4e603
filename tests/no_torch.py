"""Runs this program as the torch-free install does (`pip install .` alone): torch unimportable.

    python tests/no_torch.py --mode action ...      inference.main with these arguments
    python tests/no_torch.py --code "PYTHON"        any code (the Python API), torch still unimportable

Any `import torch` raises ImportError here, so a path that needs torch fails loudly."""
import sys
from pathlib import Path

sys.modules["torch"] = None
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__":
    if sys.argv[1:2] == ["--code"]:
        exec(compile(sys.argv[2], "<code>", "exec"), {"__name__": "__main__"})
    else:
        import inference
        sys.exit(inference.main(sys.argv[1:]))
