"""POST /v1/act timings against a running `serve --ray` (docs/serve.md#ray-serve): one client's per-line latency, then
CLIENTS clients at once (lines/s). Huggy-shaped lines (59 random numbers) unless --obs-size says otherwise.
  python tools/bench_ray_serve.py http://127.0.0.1:8000/v1/act [--lines 2000] [--clients 16] [--obs-size 59]"""

import argparse
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--lines", type=int, default=2000)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--obs-size", type=int, default=59)
    a = p.parse_args()
    rng = np.random.RandomState(0)
    lines = [json.dumps({"id": i, "obs": rng.randn(a.obs_size).round(5).tolist()}).encode() for i in range(a.lines)]

    def post(body: bytes) -> float:
        t0 = time.perf_counter()
        request = urllib.request.Request(a.url, data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert b'"error"' not in answer.read()
        return (time.perf_counter() - t0) * 1e3

    for body in lines[:50]:  # warm
        post(body)
    one = [post(body) for body in lines[: a.lines // 4]]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(a.clients) as pool:
        many = list(pool.map(post, lines))
    seconds = time.perf_counter() - t0
    print(
        f"one client: p50 {np.percentile(one, 50):.2f} ms p99 {np.percentile(one, 99):.2f} ms ({len(one)} lines) | "
        f"{a.clients} clients: {len(lines) / seconds:,.0f} lines/s, p50 {np.percentile(many, 50):.2f} ms "
        f"p99 {np.percentile(many, 99):.2f} ms ({len(lines)} lines)"
    )


if __name__ == "__main__":
    main()
