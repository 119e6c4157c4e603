"""The bare contender of --mode benchmark: a plain onnxruntime session, run in a process of its own.

An onnxruntime session keeps its intra-op threads spinning for tens of milliseconds after each run, so two sessions
in one process (the policy's and the bare one) fight for the cores and both come out slower than either alone.

This program loads the model with default options (CPU) and, on each request (a count, pickled on stdin), times that
many calls and answers the latencies in ms (pickled on stdout) once its own threads have gone idle. The first
request is the job, {"model": path or bytes, "fetch": [names], "feed": {name: array}}, answered ("ready", version)
or ("error", message). It ends when stdin closes.

It imports the standard library and onnxruntime only (numpy comes with the pickled arrays), nothing of this package,
so that it measures a bare session: benchmark reads this file's source (from the clone or from inside the one-file
.pyz alike) and runs it with `python -c`. Run as a script or with -m, it does the same.
"""

import os
import pickle
import sys
import time

__all__ = ["settle_threads", "main"]


def settle_threads(limit_s: float = 1.0) -> None:
    """Return once this process's threads are idle (this thread sleeping, no other using more than
    5 % of a core), at most limit_s: onnxruntime's pool (and OpenMP's) spins a while after a run."""
    end = time.perf_counter() + limit_s
    while time.perf_counter() < end:
        cpu, t0 = time.process_time(), time.perf_counter()
        time.sleep(0.01)
        if time.process_time() - cpu < 0.05 * (time.perf_counter() - t0):
            return


def main() -> int:
    """Serve the parent's requests on stdin/stdout until stdin closes; 1 when the session cannot start."""
    answer, ask = os.fdopen(os.dup(1), "wb"), sys.stdin.buffer
    os.dup2(2, 1)  # stray prints go to stderr, not into the answers

    def send(message) -> None:
        pickle.dump(message, answer)
        answer.flush()

    try:
        import onnxruntime as ort

        job = pickle.load(ask)
        session = ort.InferenceSession(job["model"], providers=["CPUExecutionProvider"])  # default options
        names = {i.name for i in session.get_inputs()}
        feed, fetch = {k: v for k, v in job["feed"].items() if k in names}, job["fetch"]
        run = session.run
        run(fetch, feed)
    except Exception as exc:
        text = str(exc).strip()
        send(("error", type(exc).__name__ + (": " + text.splitlines()[0][:200] if text else "")))
        return 1
    send(("ready", ort.__version__))
    perf = time.perf_counter
    while True:
        try:
            n = pickle.load(ask)
        except EOFError:  # the parent closed stdin: no more requests
            break
        run(fetch, feed)  # untimed: wakes the thread pool after the pause
        times = []
        for _ in range(n):
            t0 = perf()
            run(fetch, feed)
            times.append((perf() - t0) * 1e3)
        settle_threads()
        send(times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
