"""run_tests.sh's pass rules can fail: its checker, fed outputs that break each rule, says FAIL."""

import subprocess
import sys
import time

import pytest
from conftest import ROOT

CHECKER = ROOT / "tools" / "check_cases.py"  # (run_tests.sh runs it on each case)

ACTION = """===== deterministic action =====
  action[:8]     = [0.1, -0.2, 1.0, -1.0, 0.3, 0.4, 0.5, 0.6]
  action range   = [-1.0000, 1.0000] (must lie in [-1, 1])
SUCCESS
"""
SAMPLE = """  deterministic  = [0.1, 0.2]
  sampled#1      = [0.3, 0.4]
  sampled#2      = [0.3, 0.4]
  same seed, same draw = yes
SUCCESS
"""


def verdict(tmp_path, rule, text, code=0, others=None):
    for case, body in (others or {}).items():
        (tmp_path / f"case_{case}.out").write_text(body)
    out = tmp_path / "this.out"
    out.write_text(text)
    result = subprocess.run(
        [sys.executable, str(CHECKER), rule, str(out), str(code), str(tmp_path), str(time.time())],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


BATCH = """  first (cold) call = 1.2000 ms | steady (warm, median of 10) = 0.5000 ms
    batch[0] [0.1, -0.2, 1.0, -1.0, 0.3, 0.4]
    batch[1] [0.2, -0.3, 0.5, -0.5, 0.1, 0.2]
  output range = [-1.0000, 1.0000]
SUCCESS
"""


def test_good_outputs_pass(tmp_path):
    assert verdict(tmp_path, "action", ACTION).startswith("PASS")
    assert verdict(tmp_path, "action:7", ACTION, others={7: ACTION}).startswith("PASS")
    assert verdict(tmp_path, "sample", SAMPLE).startswith("PASS")
    assert verdict(tmp_path, "batch", BATCH, others={3: ACTION}).startswith("PASS")


@pytest.mark.parametrize("err", ["0.000e+00", "3.5e-08", "9.9e-05"])
def test_precision_is_a_bound_only(tmp_path, err):
    """float32 against float64: any error below the limit passes, zero included (a CPU whose
    float32 rounding lands on the float64 result is not a failure)."""
    text = f"  vs float64: cos = 1.0 | max_abs_err = {err} | max_rel_err = 0 |\nSUCCESS\n"
    assert verdict(tmp_path, "precision:1e-4", text).startswith("PASS")


def test_batch_tolerates_rounding_between_batch_and_single(tmp_path):
    """A batched kernel may round differently from a single-row one: 1e-5 apart still passes."""
    assert verdict(tmp_path, "batch", BATCH.replace("[0.1, -0.2,", "[0.100004, -0.2,"), others={3: ACTION}).startswith(
        "PASS"
    )


@pytest.mark.parametrize(
    "rule,text,code,others",
    [
        ("action", ACTION, 1, None),  # wrong exit code
        ("action", ACTION.replace("SUCCESS\n", "FAILED\n"), 0, None),  # no SUCCESS
        ("action", ACTION.replace("0.6]", "1.5]"), 0, None),  # action outside [-1, 1]
        ("action", ACTION.replace("[-1.0000, 1.0000]", "[-1.0000, 1.2000]"), 0, None),
        ("action:7", ACTION, 0, {7: ACTION.replace("0.1,", "0.11,")}),  # differs from the other case
        ("sample", SAMPLE.replace("sampled#2      = [0.3, 0.4]", "sampled#2      = [0.3, 0.41]"), 0, None),
        ("sample", SAMPLE.replace("[0.3, 0.4]", "[0.1, 0.2]"), 0, None),  # no noise added
        ("precision:1e-4", "  vs float64: cos = 1.0 | max_abs_err = 2.0e-03 |\nSUCCESS\n", 0, None),  # over the limit
        ("precision:1e-4", "  vs float64: cos = 0.99 | max_abs_err = 1.0e-06 |\nSUCCESS\n", 0, None),  # cos too low
        ("precision:1e-4", "  vs float64: cos = 1.0 | max_abs_err = 1.0e-06 |\nFAILED\n", 1, None),  # program failed
        ("batch", BATCH.replace("[0.1, -0.2,", "[0.1001, -0.2,"), 0, {3: ACTION}),  # batch[0] is not case 3's action
        ("batch", BATCH.replace("[-1.0000, 1.0000]", "[-1.0000, 1.5000]"), 0, {3: ACTION}),
        ("precision_lowp", "  vs float64: cos = 0.9999 | max_abs_err = 2.0e-02 |\nSUCCESS\n", 0, None),  # verdict lies
        ("onnx", "  max_abs_err = 2.0e-04 | mean_abs_err = 1e-5 | cos = 1.0\nSUCCESS\n", 0, None),
        (
            "stats:3",
            "  rollout[00] steps= 5 | in[-1,1]=True\n  rollout[01] steps= 5 | in[-1,1]=False\nSUCCESS\n",
            0,
            None,
        ),
        ("benchmark", "  avg = 1.0 ms | p50 = 2.0 ms | p95 = 1.5 ms | p99 = 3.0 ms | max = 4.0 ms\nSUCCESS\n", 0, None),
        ("export", "  max_abs_err = 0.0e+00\n  written: /nonexistent/x.onnx\nSUCCESS\n", 0, None),
    ],
)
def test_broken_outputs_fail(tmp_path, rule, text, code, others):
    assert verdict(tmp_path, rule, text, code, others).startswith("FAIL")
