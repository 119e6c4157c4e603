#!/usr/bin/env python3
"""One file to copy: dist/mlagents-infer.pyz, built with the standard library's zipapp.

    python tools/build_pyz.py                 # writes dist/mlagents-infer.pyz
    python dist/mlagents-infer.pyz --mode info   # from any folder, offline: the bundled sample inside

The archive holds the package mlagents_inference/, inference.py (so that the archive on
PYTHONPATH also gives `import inference`), the bundled sample assets/ppo-Huggy-sample/ (unpacked
into a temporary folder when it is used, removed at exit) and __main__.py, a copy of inference.py:
`python mlagents-infer.pyz ARGS` is `python inference.py ARGS`. It needs the same installed
packages (numpy, onnx, onnxruntime, torch for the modes that use it...), not the clone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import zipapp
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = Path("assets") / "ppo-Huggy-sample"


def build(output: Path) -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlagents-infer-pyz-") as staging:
        stage = Path(staging) / "app"
        shutil.copytree(
            ROOT / "mlagents_inference",
            stage / "mlagents_inference",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        shutil.copytree(ROOT / SAMPLE, stage / SAMPLE)
        shutil.copy2(ROOT / "inference.py", stage / "inference.py")
        shutil.copy2(ROOT / "inference.py", stage / "__main__.py")
        partial = Path(tempfile.mkstemp(prefix=f".{output.name}.", dir=output.parent)[1])
        try:  # written beside, then renamed: an existing archive is replaced whole or not at all
            zipapp.create_archive(stage, partial, interpreter="/usr/bin/env python3", compressed=True)
            os.chmod(partial, 0o755)
            os.replace(partial, output)
        finally:
            partial.unlink(missing_ok=True)
    return output


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--output", type=Path, default=ROOT / "dist" / "mlagents-infer.pyz", help="default: dist/mlagents-infer.pyz"
    )
    out = build(p.parse_args().output)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
