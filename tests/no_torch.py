"""Runs this program as the torch-free install does (`pip install .` alone): torch unimportable.

    python tests/no_torch.py --mode action ...      inference.main with these arguments
    python tests/no_torch.py --code "PYTHON"        any code (the Python API), torch still unimportable
    python tests/no_torch.py --requests             many of either, one interpreter (see answer_requests)

Any `import torch` raises ImportError here, so a path that needs torch fails loudly."""

import sys
from pathlib import Path

sys.modules["torch"] = None
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_code(code: str) -> None:
    exec(compile(code, "<code>", "exec"), {"__name__": "__main__"})


def answer_requests() -> None:
    """One request a line on stdin, one answer a line on the real stdout, in one interpreter (a process start each
    would cost more than most requests). {"argv": [...], "stdin": text or null} runs inference.main(argv);
    {"code": "..."} runs the code. The answer: {"code": exit code, "out": ..., "err": ...}, what the request wrote
    to file descriptors 1 and 2 (so what a library prints there too), and whether torch got imported."""
    import io
    import json
    import os
    import tempfile
    import traceback

    import inference

    requests, answers = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    for line in requests:
        request = json.loads(line)
        captured = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
        saved = [os.dup(1), os.dup(2)]
        stdin, argv = sys.stdin, list(sys.argv)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(captured[0].fileno(), 1)
        os.dup2(captured[1].fileno(), 2)
        sys.stdin = io.TextIOWrapper(io.BytesIO((request.get("stdin") or "").encode()), encoding="utf-8")
        try:
            if "argv" in request:
                sys.argv = ["inference.py", *request["argv"]]
                code = inference.main(request["argv"])
            else:
                run_code(request["code"])
                code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 (reported as a process would: a traceback and exit 1)
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sys.stdin, sys.argv[:] = stdin, argv
        out, err = [], []
        for f, text in zip(captured, (out, err)):
            f.seek(0)
            text.append(f.read().decode("utf-8", "replace"))
            f.close()
        out, err = out[0], err[0]
        answers.write(
            json.dumps({"code": code, "out": out, "err": err, "torch_imported": sys.modules.get("torch") is not None})
            + "\n"
        )
        answers.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--code"]:
        run_code(sys.argv[2])
    elif sys.argv[1:2] == ["--requests"]:
        answer_requests()
    else:
        import inference

        sys.exit(inference.main(sys.argv[1:]))
