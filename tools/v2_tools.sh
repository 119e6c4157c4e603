#!/usr/bin/env bash
# The Open Inference Protocol (KServe V2) client tools in one venv: Triton's Python client (tritonclient 2.41.0,
# HTTP and gRPC), its perf_analyzer binary, PyTriton (a reference V2 server, tools/bench_v2.py) and this project's
# requirements. Idempotent: run it again and it only checks.
#
#     bash tools/v2_tools.sh [VENV]        # default /work/v2venv
#
# It prints, last, two lines to eval:
#     PERF_ANALYZER=<venv>/bin/perf_analyzer
#     LD_LIBRARY_PATH=<the CUDA runtime wheel's lib>:...
#
# What resolves on Python 3.11 (Debian 12, glibc 2.36) beside requirements.txt, and why:
#  - tritonclient[all]==2.41.0: its wheel carries bin/perf_analyzer. Its http extra pins geventhttpclient<=2.0.2,
#    which has a cp311 manylinux wheel (2.0.2). perf_analyzer links libb64.so.0d (Debian's libb64-0d) and
#    libcudart.so.12 even when no GPU is used: nvidia-cuda-runtime-cu12 ships the latter, found through
#    LD_LIBRARY_PATH (the wheel sets no rpath to it).
#  - nvidia-pytriton==0.5.0: the newest PyTriton whose tritonclient pin (~=2.41) admits 2.41.0; 0.6 and 0.7 want
#    tritonclient~=2.50 and would replace 2.41.0, so they need a venv of their own. 0.5.0 bundles its tritonserver
#    (a manylinux_2_35 build; runs on glibc 2.36) and wants numpy<2.
#  - numpy<2 (PyTriton) means pyarrow<26 (pyarrow 26 needs numpy 2; requirements.txt says so too).
#  - PyTriton 0.7.0 (issue 43's figures, docs/performance.md): a venv of its own beside this one, made with
#    --system-site-packages and `pip install "nvidia-pytriton==0.7.0" nvidia-cuda-runtime-cu12`; bench_v2.py runs
#    in it with --perf-analyzer pointing at this venv's perf_analyzer 2.41.0 and --serve-python at the interpreter
#    that has requirements.txt (0.7 pins numpy<2 in its venv; serve keeps its own).
set -euo pipefail

VENV=${1:-/work/v2venv}
PYTHON=${PYTHON:-python3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! dpkg -s libb64-0d >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libb64-0d >/dev/null
    else
        echo "v2_tools: perf_analyzer needs libb64-0d: apt-get install -y libb64-0d (as root)" >&2
        exit 1
    fi
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"

PINS=("tritonclient[all]==2.41.0" "nvidia-pytriton==0.5.0" "nvidia-cuda-runtime-cu12" "grpcio" "numpy<2" "pyarrow<26")
# (installed already: every line of requirements*.txt and the pins satisfied; otherwise pip installs them all)
if ! (cd "$ROOT" && "$VENV/bin/python" - "${PINS[@]}" >/dev/null 2>&1) <<'EOF'; then
import sys
from importlib.metadata import version

from packaging.requirements import Requirement

specs = list(sys.argv[1:])
for name in ("requirements.txt", "requirements-ascend.txt"):
    specs += [line.split("#")[0].strip() for line in open(name) if line.strip() and line[0] not in "#-"]
for spec in specs:
    req = Requirement(spec)
    assert req.specifier.contains(version(req.name), prereleases=True), spec
EOF
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$ROOT/requirements.txt" "${PINS[@]}"
fi

# (nvidia.cuda_runtime is a namespace package in the 12.9 wheels: no __file__, its __path__ instead)
CUDART=$("$VENV/bin/python" -c "import nvidia.cuda_runtime as m; print(list(m.__path__)[0])")/lib
LIBS="$CUDART${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# (perf_analyzer --help prints its usage but exits 99, "unrecognized option"; --version exits 0. A missing library
# stops either before it prints.)
VERSION=$(LD_LIBRARY_PATH="$LIBS" "$VENV/bin/perf_analyzer" --version 2>&1 || true)
USAGE=$(LD_LIBRARY_PATH="$LIBS" "$VENV/bin/perf_analyzer" --help 2>&1 || true)
if [[ $VERSION != *"Perf Analyzer Version 2.41.0"* || $USAGE != *"--concurrency-range"* ]]; then
    echo "$VERSION" | head -5 >&2
    ldd "$VENV/bin/perf_analyzer" | grep "not found" >&2 || true
    exit 1
fi
echo "PERF_ANALYZER=$VENV/bin/perf_analyzer"
echo "LD_LIBRARY_PATH=$LIBS"
