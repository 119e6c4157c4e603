#!/usr/bin/env bash
# One-command accelerator check: on a machine with a CUDA GPU or an Ascend NPU and its
# preinstalled torch (no network, nothing installed), run from the repository root or anywhere:
#
#     bash tools/device_check.sh
#
# It writes ONE log (default logs/device_check.log) holding, for the chosen device:
#   1. python inference.py --mode info
#   2. parity: onnx-compare and precision --dtype float32 for the bundled sample
#      (assets/ppo-Huggy-sample), every run folder under examples/ and examples/trained/, and every
#      fixture folder found under $FIXTURES (ppo-*/, zoo/*/ — any folder with a <Behavior>/
#      subfolder holding .pt files), when that folder exists. Gates at PARITY_TOL (1e-5; a TF32- or
#      HF32-sized error, ~1e-3, fails): onnx-compare --tol against ML-Agents' ONNX on the CPU's
#      onnxruntime (float32; the LSTM memory: max error relative to max(1, |value|) of the next memory
#      and of every step of its --steps rollout, each side carrying its own memory, within the same
#      1e-5), precision --tol against float64 and, in the verdict, its vs_cpu_float32 max error (the
#      device against the CPU's float32 torch engine) within 1e-5 as well
#   2c. probe (tools/device_probe.py, figures, not gated): pageable against pinned bandwidth; for batches
#      PROBE_BATCHES (1, 64, 4096, 65536) p50/p99 of act() with host arrays and with tensors on the card,
#      and a card-event split of copy in / replay / copy out; kernels per replay (CUDA); forwards per
#      act(); the engine's captures, replays and eager calls
#   5a. float16 and bfloat16 on examples/attention (its masked softmax), early (recorded as step 5)
#   3. benchmark at --batch 1, 64, 4096, 65536 with device graphs on and off (--graphs on|off;
#      when the CLI refuses --graphs, once per batch without it, noted in the log)
#   4. stream: 10,000 JSON lines {"obs": [59 floats]} made here, piped through one process:
#      lines/s from first to last answer, and with process start included; its --stream-stats line
#      (captures, replays, eager calls: on a card with graphs on, an eager call fails the step)
#   5. precision --dtype float16 and bfloat16 for the same folders (recorded: exit 1 = the
#      measured error misses --tol, which is not a failure here; any other non-zero exit is)
#   2b. device graphs against eager and against the CPU on the device (tools/device_compare.py graphs, 1e-5; a graph
#      that did not run is a failure), and on the second card (7) with a second policy on the first card, in one process
#   4b. the torch-free path: the sample's ML-Agents ONNX on onnxruntime's provider for the device (torch unimportable),
#      when onnxruntime-gpu / onnxruntime-cann is installed: its answers against the CPU provider's within 1e-5
#      (tools/device_compare.py providers; an error of 1e-4 or more is named float16-sized: CANN's force_fp16, TF32);
#      its action and a benchmark
#   7. the second card (SECOND_DEVICE, else <kind>:1 where torch sees two): graphs on against off and against the CPU
#      there, a second policy on the first card in the same process (device graphs captured on card 0 only: issue 33)
#   8. NPU: a run without CANN's environment (its variables and Ascend paths removed): one line naming set_env.sh (exit
#      2) or a run (exit 0), never a traceback; then the same with TORCH_DEVICE_BACKEND_AUTOLOAD=0 on the CPU (exit 0)
#   9. NPU: TASK_QUEUE_ENABLE=2 (torch_npu refuses graph capture there): info says graphs are off and why; the eager
#      answers against the CPU within 1e-5
#   6. DEVICE=<dev> bash run_tests.sh (the 50-case replay), its own log appended at the end
# Order: 1, 2, 2b, 2c, 5a, 3, 4, 4b, 7, 8, 9, 5, 6 (the issue-33 and -41 checks before the long sweeps, which the
# budget cuts first).
# The commit: the device's copy of the tree may carry no history, so the caller writes the commit id into the file
# COMMIT (COMMIT_FILE=path) at the repository root before the run (git rev-parse HEAD > COMMIT); the log prints it,
# and git's own answer where there is one.
# Each step: its command, exit code, wall time and verdict; a summary at the end.
# Parity steps (2, 5) run PARALLEL at a time; benchmarks and run_tests.sh run alone.
#
# Exit: 0 every step passed | 1 a step failed (float32 parity miss, error, its own time-out) |
#       2 no accelerator (or bad settings) | 3 nothing failed, but steps were left out or cut
#       short by TIME_BUDGET (SKIP / CUT in the summary).
#
# Settings (environment):
#   DEVICE=npu:0|cuda:0|...  device (default: npu if torch_npu sees one, else cuda, else exit 2)
#   ALLOW_CPU=1 DEVICE=cpu   CPU dry run of the whole script (says so in the log); it also
#                            lowers the defaults marked (dry) below, unless they are set
#   DEVICE_CHECK_LOG=path    the log (default logs/device_check.log; relative to the repo root)
#   FIXTURES=dir             fixture root (default $HUGGY_FIXTURES, else ../shared/fixtures)
#   PYTHON=python3           interpreter (default python)
#   SECOND_DEVICE=npu:1      the second card: step 7, and run_tests.sh's cases 44, 49, 50 (default for step 7:
#                            <kind>:1 where torch sees two devices)
#   TIME_BUDGET=450          seconds for the whole run; steps that no longer fit are left out
#   PARALLEL=4               parity steps at a time (dry: 2)
#   ONLY=regex               only the example and fixture folders whose path matches (grep -E); the bundled
#                            sample is always checked
#   BENCH_RUNS="1:1000 64:500 4096:100 65536:20"   batch:runs pairs (dry: 1:50 64:20 4096:5);
#                            BENCH_RUNS= (empty) leaves out step 3
# When the budget runs out (slow process start, e.g. torch_npu's import), the summary says
# which steps were left out; rerun those alone, e.g. BENCH_RUNS= LOWP=0 ONLY=none for the
# info, bundled-sample parity, stream and run_tests.sh steps.
#   STREAM_LINES=10000       lines for the stream step (dry: 2000)
#   PARITY_TOL=1e-5          the float32 parity gate (step 2)
#   PROBE_BATCHES=1,64,4096,65536   the probe's batches (dry: 1,64,4096); PROBE_BATCHES= leaves out step 2c
#   STEP_TIMEOUT=120         cap for one step (run_tests.sh gets what is left of the budget)
#   LOWP=1                   0 leaves out step 5; RUN_TESTS=1: 0 leaves out step 6
set -u
cd "$(dirname "$0")/.." || exit 2
ROOT="$(pwd)"
PY="${PYTHON:-python}"
LOG="${DEVICE_CHECK_LOG:-logs/device_check.log}"
FIXTURES="${FIXTURES:-${HUGGY_FIXTURES:-../shared/fixtures}}"
SAMPLE="assets/ppo-Huggy-sample"
STARTED=$(date +%s)
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1   # no network there: never wait on the Hub

die() { echo "device_check: $*" >&2; exit 2; }
command -v timeout >/dev/null || die "needs coreutils 'timeout'"
command -v "$PY" >/dev/null || die "no '$PY' on PATH (set PYTHON=...)"
[ -f inference.py ] || die "no inference.py in $ROOT"

# ---------------------------------------------------------------- device
probe="$(timeout -k 5 180 "$PY" - <<'PYEOF' 2>&1
import importlib.util, os
try:
    import torch
except Exception as e:
    print("torch=missing (%s)" % e); print("found=none"); raise SystemExit
print("torch=%s" % torch.__version__)
found = "none"
if importlib.util.find_spec("torch_npu"):
    try:
        import torch_npu
        n = torch.npu.device_count() if torch.npu.is_available() else 0
        print("torch_npu=%s npus=%d" % (torch_npu.__version__, n)); print("count_npu=%d" % n)
        if n:
            found = "npu:0"; print("name=%s" % torch.npu.get_device_name(0))
            # defaults before inference.py switches them off for float32 (engines.full_float32)
            print("hf32_defaults=%s" % " ".join("%s:%s" % (g, getattr(getattr(torch.npu, g, None), "allow_hf32", "n/a"))
                                                for g in ("conv", "matmul", "aclnn")))
    except Exception as e:
        print("torch_npu=error (%s)" % str(e).splitlines()[0][:200])
if found == "none":
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    print("cuda=%s gpus=%d" % (torch.version.cuda, n)); print("count_cuda=%d" % n)
    if n:
        found = "cuda:0"; print("name=%s" % torch.cuda.get_device_name(0))
print("found=%s" % found)
PYEOF
)"
found="$(printf '%s\n' "$probe" | sed -n 's/^found=//p' | tail -n 1)"
DRY=0
if [ -z "${DEVICE:-}" ] || [ "${DEVICE}" = auto ]; then
  if [ -z "$found" ] || [ "$found" = none ]; then
    echo "device_check: no CUDA GPU or Ascend NPU is visible to torch here; this script checks an accelerator." >&2
    printf '%s\n' "$probe" | sed 's/^/  /' >&2
    echo "  (for a CPU dry run of the script itself: ALLOW_CPU=1 DEVICE=cpu bash tools/device_check.sh)" >&2
    exit 2
  fi
  DEVICE="$found"
elif [ "${DEVICE%%:*}" = cpu ]; then
  [ "${ALLOW_CPU:-0}" = 1 ] || die "DEVICE=cpu is a dry run only: set ALLOW_CPU=1 as well (it checks no accelerator)"
  DRY=1
fi
case "${DEVICE%%:*}" in cpu|cuda|npu) ;; *) die "DEVICE=$DEVICE: expected npu[:N], cuda[:N] (or cpu with ALLOW_CPU=1)" ;; esac

if [ "$DRY" = 1 ]; then
  PARALLEL="${PARALLEL:-2}"; BENCH_RUNS="${BENCH_RUNS-1:50 64:20 4096:5}"; STREAM_LINES="${STREAM_LINES:-2000}"
else
  PARALLEL="${PARALLEL:-4}"; BENCH_RUNS="${BENCH_RUNS-1:1000 64:500 4096:100 65536:20}"; STREAM_LINES="${STREAM_LINES:-10000}"
fi
TIME_BUDGET="${TIME_BUDGET:-450}"
PARITY_TOL="${PARITY_TOL:-1e-5}"
if [ "$DRY" = 1 ]; then PROBE_BATCHES="${PROBE_BATCHES-1,64,4096}"; else PROBE_BATCHES="${PROBE_BATCHES-1,64,4096,65536}"; fi
COMMIT_FILE="${COMMIT_FILE:-COMMIT}"
STEP_TIMEOUT="${STEP_TIMEOUT:-120}"
LOWP="${LOWP:-1}"
RUN_TESTS="${RUN_TESTS:-1}"
DEADLINE=$((STARTED + TIME_BUDGET))

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$LOG")" || die "cannot make the folder of $LOG"
: > "$LOG" || die "cannot write $LOG"

# ---------------------------------------------------------------- verdicts
cat > "$WORK/verdict.py" <<'PYEOF'
"""verdict.py KIND RC STDOUT STDERR -> 'STATUS<TAB>figures' (STATUS: PASS FAIL MISS TIMEOUT ERROR)."""
import json, sys
kind, rc, path, err_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    text = open(path, encoding="utf-8", errors="replace").read()
except OSError:
    text = ""
data = {}
for line in reversed(text.strip().splitlines()):
    try:
        data = json.loads(line); break
    except ValueError:
        continue
if not isinstance(data, dict):
    data = {}

def g(key, fmt="{:.3e}"):
    v = data.get(key)
    if v is None:
        return "?"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)

if kind == "info":
    figs = "device %s, time to first action %s s" % (g("device", "{}"), g("time_to_first_action_s", "{:.2f}"))
elif kind == "onnx":
    parts = []
    if data.get("max_abs_err") is not None or data.get("discrete_mismatches") is None:
        parts.append("max_abs_err %s, cos %s" % (g("max_abs_err"), g("cos", "{:.9f}")))
    if data.get("discrete_mismatches") is not None:
        parts.append("discrete mismatches %s" % g("discrete_mismatches", "{}"))
    if data.get("rows") is not None:
        parts.append("%s rows" % g("rows", "{}"))
    figs = ", ".join(parts)
elif kind == "stream":
    figs = "%s/%s answered, %s bad; %s lines/s first to last answer, %s lines/s with process start (first answer after %s s)" % (
        g("answers_ok", "{}"), g("lines_in", "{}"), g("answers_bad", "{}"), g("lines_per_s_steady", "{:,.0f}"),
        g("lines_per_s_with_start", "{:,.0f}"), g("first_answer_s", "{:.2f}"))
    if data.get("graph_calls"):
        figs += "; device graph calls %s" % g("graph_calls", "{}")
elif kind in ("precision", "lowp"):
    figs = "%s: cos %s, max_abs_err %s (tol %s)" % (g("dtype", "{}"), g("cos", "{:.8f}"), g("max_abs_err"), g("tol", "{}"))
    cpu32 = (data.get("vs_cpu_float32") or {}).get("max_abs_err")
    if cpu32 is not None:
        figs += "; against the CPU's float32 %.3e" % cpu32
elif kind == "bench":
    figs = "p50 %s ms, p99 %s ms, %s obs/s, engine %s" % (g("p50_ms", "{:.4f}"), g("p99_ms", "{:.4f}"),
                                                        g("throughput_per_s", "{:,.0f}"), g("engine", "{}"))
    if data.get("graphs"):
        figs += "; device graphs %s" % g("graphs", "{}")
elif kind == "check":  # tools/device_compare.py: its own summary (verdict, max error, what was compared, graphs)
    figs = g("summary", "{}")
elif kind == "tq2":  # TASK_QUEUE_ENABLE=2: info must say that graphs are off, and why
    figs = "device graphs: %s" % g("graphs", "{}")
    if data.get("onnxruntime_p50_ms") is not None:
        figs += "; bare onnxruntime (CPU) p50 %s ms" % g("onnxruntime_p50_ms", "{:.4f}")
else:
    figs = ""
if rc in (124, 137):
    status = "TIMEOUT"
elif rc == 0:
    status = "PASS"
elif rc == 1 and kind == "lowp":
    status = "MISS"  # low precision measured outside tol: recorded, not a failure
elif rc == 1:
    status = "FAIL"
else:
    status = "ERROR"
if not data and rc in (0, 1) and kind not in ("other", "noenv"):
    status, figs = "ERROR", "exit %d but no JSON result on stdout" % rc
if kind == "precision" and status == "PASS" and not (data.get("vs_cpu_float32") or {}).get("max_abs_err", 1.0) <= float(data.get("tol") or 0):
    status = "FAIL"  # float32 on the device further than the gate from the CPU's float32
if kind == "stream" and status == "PASS" and (data.get("graph_calls") or {}).get("eager"):
    status = "FAIL"  # graphs on, yet some calls ran eager after warm-up
if kind == "tq2" and status == "PASS" and "TASK_QUEUE_ENABLE" not in str(data.get("graphs")):
    status = "FAIL"  # graphs reported on (or silent) where torch_npu refuses capture
if kind == "noenv":  # without CANN's environment: a run, or ONE line naming set_env.sh; never a traceback
    try:
        lines = [l.strip() for l in open(err_path, encoding="utf-8", errors="replace") if l.strip()]
    except OSError:
        lines = []
    told = rc == 2 and len(lines) == 1 and "set_env.sh" in lines[0]
    status = "PASS" if rc == 0 or told else "FAIL"
    figs = "ran (exit 0)" if rc == 0 else ("told in one line: " if told else "exit %d: " % rc) + (lines[-1][:200] if lines else "")
    data = {"told": told}
if status not in ("PASS", "MISS") and not data:
    try:
        lines = [l.strip() for l in open(err_path, encoding="utf-8", errors="replace") if l.strip()]
    except OSError:
        lines = []
    if lines:
        figs = lines[-1][:200]
print(status + "\t" + figs)
PYEOF

# ---------------------------------------------------------------- steps
# A step is recorded in $WORK/rec/NNNN.* ; records are appended to the log in number order.
mkdir -p "$WORK/rec"
SEQ=0
FLUSHED=0
remaining() { echo $((DEADLINE - $(date +%s))); }

# step KIND NAME -- CMD...   (runs CMD under timeout; stdout/stderr kept apart)
step() {
  local kind="$1" name="$2"; shift 3
  local id="$1"; shift
  local r="$WORK/rec/$id" left t s e rc
  printf '%s\n' "$name" > "$r.name"
  printf '%q ' "$@" > "$r.cmd"
  left=$(remaining)
  if [ "$left" -lt 15 ]; then
    printf 'SKIP\tnot run: %ss of the %ss budget left\n' "$left" "$TIME_BUDGET" > "$r.verdict"
    echo 0 > "$r.secs"; echo "-" > "$r.rc"; return
  fi
  t=$STEP_TIMEOUT; [ "$t" -gt $((left - 5)) ] && t=$((left - 5))
  echo "$t" > "$r.limit"
  s=$(date +%s.%N)
  timeout -k 5 "$t" "$@" > "$r.out" 2> "$r.err" < /dev/null
  rc=$?
  e=$(date +%s.%N)
  echo "$rc" > "$r.rc"
  awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f\n", b - a }' > "$r.secs"
  "$PY" "$WORK/verdict.py" "$kind" "$rc" "$r.out" "$r.err" > "$r.verdict" 2>/dev/null || printf 'ERROR\tverdict failed\n' > "$r.verdict"
  if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ "$t" -lt "$STEP_TIMEOUT" ]; then
    printf 'CUT\tstopped by the time budget after %ss\n' "$t" > "$r.verdict"  # not its own time-out
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    printf 'TIMEOUT\tstopped after STEP_TIMEOUT=%ss\n' "$t" > "$r.verdict"
  fi
}
next_id() { SEQ=$((SEQ + 1)); ID=$(printf '%04d' "$SEQ"); }
run_now() { next_id; step "$1" "$2" -- "$ID" "${@:4}"; }
run_bg() {  # same as run_now, PARALLEL at a time
  next_id
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n; done
  step "$1" "$2" -- "$ID" "${@:4}" &
}
flush() {  # append the records not yet in the log
  wait
  local i r
  for ((i = FLUSHED + 1; i <= SEQ; i++)); do
    r="$WORK/rec/$(printf '%04d' "$i")"
    {
      printf '\n===== [%d] %s =====\n' "$i" "$(cat "$r.name")"
      printf 'command: %s\n' "$(cat "$r.cmd")"
      printf 'exit code: %s | wall: %s s | timeout: %s s | verdict: %s\n' \
        "$(cat "$r.rc")" "$(cat "$r.secs")" "$(cat "$r.limit" 2>/dev/null || echo -)" "$(tr '\t' ' ' < "$r.verdict")"
      if [ -s "$r.out" ]; then echo "--- stdout ---"; head -c 20000 "$r.out"; echo; fi
      if [ -s "$r.err" ]; then echo "--- stderr ---"; tail -c 6000 "$r.err"; echo; fi
      [ -f "$r.note" ] && cat "$r.note"
    } >> "$LOG"
  done
  FLUSHED=$SEQ
}
say() { printf '%s\n' "$*" | tee -a "$LOG"; }

# ---------------------------------------------------------------- header
{
  echo "# device_check.sh — $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname)"
  if [ "$DRY" = 1 ]; then
    echo "# *** CPU DRY RUN (ALLOW_CPU=1 DEVICE=cpu): this checks the script, NOT an accelerator. ***"
    echo "# *** No figure below is a GPU or NPU figure.                                              ***"
  fi
  echo "# device=$DEVICE (auto-detected: ${found:-?}) second_device=${SECOND_DEVICE:-none}"
  echo "# probe: $(printf '%s\n' "$probe" | tr '\n' ' ')"
  if [ -s "$COMMIT_FILE" ]; then
    echo "# commit: $(head -c 200 "$COMMIT_FILE" | head -n 1) (from $COMMIT_FILE, written before the run); git here: $(git rev-parse HEAD 2>/dev/null || echo 'no history')"
  else
    echo "# commit: $(git rev-parse HEAD 2>/dev/null || echo "? (no history and no $COMMIT_FILE: write the commit id into $COMMIT_FILE before the run)")$(git diff --quiet HEAD -- inference.py mlagents_inference 2>/dev/null || echo " (the code differs from that commit)")"
  fi
  echo "# python: $("$PY" -c 'import sys; print(sys.version.split()[0])') | numpy $("$PY" -c 'import numpy; print(numpy.__version__)' 2>/dev/null || echo missing) | onnxruntime $("$PY" -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null || echo 'missing (onnx-compare cannot run)') | onnx $("$PY" -c 'import onnx; print(onnx.__version__)' 2>/dev/null || echo missing)"
  echo "# budget ${TIME_BUDGET}s, step timeout ${STEP_TIMEOUT}s, parallel parity steps ${PARALLEL}, benchmark batch:runs ${BENCH_RUNS}, stream lines ${STREAM_LINES}"
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "# nvidia-smi: $(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu,utilization.gpu --format=csv,noheader 2>&1 | head -n 4 | tr '\n' ';')"
  fi
  if command -v npu-smi >/dev/null 2>&1; then
    echo "# npu-smi info:"; timeout 20 npu-smi info 2>&1 | head -n 30 | sed 's/^/#   /'
  fi
} > "$LOG"
[ "$DRY" = 1 ] && echo "device_check: CPU DRY RUN — checks the script, not an accelerator"
echo "device_check: device $DEVICE, log $LOG"

# ---------------------------------------------------------------- models
MODELS=("$SAMPLE")
add_models() {  # run folders: any folder with a <Behavior>/ subfolder holding .pt files
  local d
  for d in "$@"; do
    [ -d "$d" ] || continue
    compgen -G "${d}*/*.pt" > /dev/null || continue
    if [ -n "${ONLY:-}" ] && ! printf '%s\n' "$d" | grep -Eq -- "$ONLY"; then continue; fi
    MODELS+=("${d%/}")
  done
}
add_models examples/*/ examples/trained/*/   # the repository's own: one per policy kind, and Unity's trained three
EXAMPLES=$(( ${#MODELS[@]} - 1 ))
if [ -d "$FIXTURES" ]; then
  add_models "$FIXTURES"/ppo-*/ "$FIXTURES"/zoo/*/
  say "# models: ${#MODELS[@]} (bundled sample + $EXAMPLES under examples/ + $(( ${#MODELS[@]} - 1 - EXAMPLES )) fixture folders under $FIXTURES${ONLY:+ matching ONLY=$ONLY})"
else
  say "# models: ${#MODELS[@]} (bundled sample + $EXAMPLES under examples/${ONLY:+ matching ONLY=$ONLY}; no fixture folder at FIXTURES=$FIXTURES)"
fi

CLI=("$PY" inference.py --device "$DEVICE")

# 1. info
run_now other "info" -- "${CLI[@]}" --mode info
flush

# 2. float32 parity
for m in "${MODELS[@]}"; do
  run_bg onnx "onnx-compare float32: $m (tol $PARITY_TOL)" -- "${CLI[@]}" --mode onnx-compare --model-dir "$m" --tol "$PARITY_TOL" --json
  run_bg precision "precision float32: $m (tol $PARITY_TOL, against float64 and the CPU's float32)" -- "${CLI[@]}" --mode precision --dtype float32 --model-dir "$m" --tol "$PARITY_TOL" --json
done
flush

# 2b. device graphs: the graph against eager and both against the CPU, on the device (issue 33)
run_now check "graphs on $DEVICE: on against off and against the CPU (1e-5)" -- \
  "$PY" tools/device_compare.py graphs --device "$DEVICE" --model-dir "$SAMPLE"
flush

# 2c. probe: bandwidth, host arrays against tensors on the card, the card-event split, forwards per act()
if [ -n "$PROBE_BATCHES" ]; then
  run_now check "probe on $DEVICE: bandwidth, act() with host arrays and card tensors, copy in/replay/copy out (batches $PROBE_BATCHES)" -- \
    "$PY" tools/device_probe.py --device "$DEVICE" --model-dir "$SAMPLE" --batches "$PROBE_BATCHES"
  flush
fi

# 5a. low precision on the attention policy (its masked softmax in float16: issue 41), before the budget cuts step 5
if [ "$LOWP" = 1 ] && [ -d examples/attention ]; then
  for dt in float16 bfloat16; do
    run_bg lowp "precision $dt: examples/attention" -- "${CLI[@]}" --mode precision --dtype "$dt" --model-dir examples/attention --json
  done
  flush
fi

# 3. benchmarks (alone), graphs on and off
GRAPHS="not tried (no benchmark)"
for pair in $BENCH_RUNS; do
  b="${pair%%:*}"; runs="${pair#*:}"
  base=("${CLI[@]}" --mode benchmark --model-dir "$SAMPLE" --batch "$b" --runs "$runs" --json)
  if [ "$GRAPHS" = unsupported ]; then
    run_now bench "benchmark batch $b (CLI default graphs; --graphs refused)" -- "${base[@]}"
    continue
  fi
  for gr in on off; do
    run_now bench "benchmark batch $b --graphs $gr" -- "${base[@]}" --graphs "$gr"
    r="$WORK/rec/$ID"
    if [ "$(cat "$r.rc")" = 2 ] && grep -qi graphs "$r.err" 2>/dev/null; then
      GRAPHS=unsupported
      echo "note: this CLI refused --graphs ($(head -c 200 "$r.err" | tr '\n' ' ')); benchmarks below run once per batch with the CLI's default (device graphs where its engine uses them)." > "$r.note"
      printf 'SKIP\t--graphs refused by this CLI (noted); rerun without it\n' > "$r.verdict"
      run_now bench "benchmark batch $b (CLI default graphs; --graphs refused)" -- "${base[@]}"
      break
    fi
    GRAPHS=supported
  done
done
flush

# 4. stream: a driver feeds the lines through a pipe as fast as the policy takes them and
#    times the answers: lines/s from first to last answer, and with process start included.
cat > "$WORK/stream_drive.py" <<'PYEOF'
"""stream_drive.py N CMD... -> one JSON line; exit: the CLI's exit if non-zero, else 0 iff all N answered."""
import json, subprocess, sys, threading, time
import numpy as np
n, cmd = int(sys.argv[1]), sys.argv[2:]
obs = np.random.RandomState(0).randn(n, 59).astype(np.float32)  # the bundled sample takes 59 floats
payload = "".join(json.dumps({"obs": [float(v) for v in row]}) + "\n" for row in obs).encode()
t0 = time.perf_counter()
proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
errors = []
threading.Thread(target=lambda: errors.extend(proc.stderr.read().decode("utf-8", "replace").splitlines()), daemon=True).start()

def feed():
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass

threading.Thread(target=feed, daemon=True).start()
good = bad = 0
first = last = None
example = None
for line in proc.stdout:
    now = time.perf_counter()
    first = now if first is None else first
    last = now
    try:
        d = json.loads(line)
    except ValueError:
        d = None
    if isinstance(d, dict) and "error" not in d and ("actions" in d or "continuous_actions" in d):
        good += 1
    else:
        bad += 1
        example = example or line[:200].decode("utf-8", "replace")
rc = proc.wait()
total = time.perf_counter() - t0
time.sleep(0.2)  # (the stderr reader's last lines)
for line in errors[-20:]:
    print(line, file=sys.stderr)
stats = next((l for l in reversed(errors) if l.startswith("[stream] ")), None)
calls = None
if stats and " graphs=" in stats:  # graphs=captures:N,replays:N,eager:N
    calls = {k: int(v) for k, v in (kv.split(":") for kv in stats.split(" graphs=", 1)[1].split()[0].split(","))}
steady = (good + bad - 1) / (last - first) if first is not None and last > first else None
print(json.dumps({"lines_in": n, "answers_ok": good, "answers_bad": bad, "first_bad": example, "exit": rc,
                  "first_answer_s": None if first is None else round(first - t0, 3), "total_s": round(total, 3),
                  "lines_per_s_steady": steady and round(steady, 1), "lines_per_s_with_start": round(n / total, 1),
                  "stats": stats, "graph_calls": calls}))
sys.exit(rc if rc else (0 if good == n and bad == 0 else 1))
PYEOF
run_now stream "stream: $STREAM_LINES JSON lines {\"obs\": [59 floats]} through one process" -- \
  "$PY" "$WORK/stream_drive.py" "$STREAM_LINES" "${CLI[@]}" --mode stream --model-dir "$SAMPLE" --stats
flush

# 4b. the torch-free path (issue 25): the bundled sample's ML-Agents ONNX on onnxruntime's provider for the device,
#     torch made unimportable (tests/no_torch.py), when this onnxruntime has that provider (onnxruntime-gpu on CUDA,
#     onnxruntime-cann on Ascend); against the same run on the CPU provider
case "${DEVICE%%:*}" in cuda) PROV=CUDAExecutionProvider ;; npu) PROV=CANNExecutionProvider ;; *) PROV=CPUExecutionProvider ;; esac
if timeout 60 "$PY" -c "import onnxruntime, sys; sys.exit('$PROV' not in onnxruntime.get_available_providers())" 2>/dev/null; then
  run_now check "torch-free: $PROV against the CPU provider within 1e-5 (float16-sized errors named)" -- \
    "$PY" tools/device_compare.py providers --device "$DEVICE" --model-dir "$SAMPLE" --torch-free
  run_now other "torch-free: the sample's ONNX on $PROV ($DEVICE)" -- "$PY" tests/no_torch.py --mode action --device "$DEVICE" --model-dir "$SAMPLE" --obs ones --json
  run_now other "torch-free: the same on the CPU provider" -- "$PY" tests/no_torch.py --mode action --device cpu --model-dir "$SAMPLE" --obs ones --json
  run_now other "torch-free: benchmark batch 64 on $PROV" -- "$PY" tests/no_torch.py --mode benchmark --device "$DEVICE" --model-dir "$SAMPLE" --batch 64 --runs 200 --json
else
  echo "# 4b torch-free step left out: this onnxruntime has no $PROV (onnxruntime-gpu on CUDA, onnxruntime-cann on Ascend)" >> "$LOG"
fi
flush

# 7. the second card (issue 33: graphs captured on the current card, 0, recorded nothing on another)
KIND="${DEVICE%%:*}"
COUNT="$(printf '%s\n' "$probe" | sed -n "s/^count_$KIND=//p" | tail -n 1)"
DEV2="${SECOND_DEVICE:-}"
if [ -z "$DEV2" ] && [ "${COUNT:-0}" -ge 2 ] 2>/dev/null; then DEV2="$KIND:1"; fi
if [ -n "$DEV2" ] && [ "$DRY" = 0 ]; then
  FIRST="$KIND:0"; [ "$DEV2" = "$FIRST" ] && FIRST="$DEVICE"
  run_now check "second card $DEV2: graphs on against off and the CPU; a second policy on $FIRST in the same process" -- \
    "$PY" tools/device_compare.py graphs --device "$DEV2" --second "$FIRST" --model-dir "$SAMPLE"
  run_now info "info on $DEV2" -- "$PY" inference.py --device "$DEV2" --mode info --json
else
  echo "# 7 second-card step left out: ${DEV2:+a dry run}${DEV2:-one device (set SECOND_DEVICE=... where there are two)}" >> "$LOG"
fi
flush

if [ "$KIND" = npu ]; then
  # 8. without CANN's environment: set_env.sh's variables unset, its Ascend paths taken out of the search paths
  strip_ascend() { printf '%s' "$1" | tr ':' '\n' | grep -vi ascend | paste -sd: -; }
  NOENV=(env -u ASCEND_TOOLKIT_HOME -u ASCEND_HOME_PATH -u ASCEND_OPP_PATH -u ASCEND_AICPU_PATH -u TOOLCHAIN_HOME
         -u ASCEND_CUSTOM_OPP_PATH "LD_LIBRARY_PATH=$(strip_ascend "${LD_LIBRARY_PATH:-}")"
         "PYTHONPATH=$(strip_ascend "${PYTHONPATH:-}")" "PATH=$(strip_ascend "$PATH")")
  PYABS="$(command -v "$PY")"   # (found before the Ascend paths leave PATH)
  run_now noenv "without CANN's environment: --device cpu (a run, or one line naming set_env.sh)" -- \
    "${NOENV[@]}" "$PYABS" inference.py --device cpu --mode action --model-dir "$SAMPLE" --obs ones --json
  run_now other "without CANN's environment, TORCH_DEVICE_BACKEND_AUTOLOAD=0: --device cpu runs" -- \
    "${NOENV[@]}" TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PYABS" inference.py --device cpu --mode action --model-dir "$SAMPLE" --obs ones --json
  # 9. TASK_QUEUE_ENABLE=2: torch_npu refuses graph capture; info says so, and eager holds against the CPU
  run_now tq2 "TASK_QUEUE_ENABLE=2: info says graphs are off and why" -- \
    env TASK_QUEUE_ENABLE=2 "$PY" inference.py --device "$DEVICE" --mode info --json
  run_now check "TASK_QUEUE_ENABLE=2: eager on $DEVICE against the CPU (1e-5)" -- \
    env TASK_QUEUE_ENABLE=2 "$PY" tools/device_compare.py graphs --device "$DEVICE" --allow-eager --model-dir "$SAMPLE"
  flush
else
  echo "# 8, 9 (without CANN's environment; TASK_QUEUE_ENABLE=2) left out: NPU only" >> "$LOG"
fi

# 5. low precision (recorded; examples/attention ran in 5a)
if [ "$LOWP" = 1 ]; then
  for m in "${MODELS[@]}"; do
    [ "$m" = examples/attention ] && continue
    for dt in float16 bfloat16; do
      run_bg lowp "precision $dt: $m" -- "${CLI[@]}" --mode precision --dtype "$dt" --model-dir "$m" --json
    done
  done
  flush
fi

# 6. run_tests.sh with what is left
RT_ID=""
if [ "$RUN_TESTS" = 1 ]; then
  next_id; RT_ID=$ID
  save=$STEP_TIMEOUT; STEP_TIMEOUT=$(( $(remaining) > 0 ? $(remaining) : 0 ))
  step other "run_tests.sh (50 cases) on $DEVICE" -- "$ID" env DEVICE="$DEVICE" PYTHON="$PY" bash run_tests.sh
  STEP_TIMEOUT=$save
  rr="$WORK/rec/$RT_ID"
  done_cases=$(grep -c '^case' "$rr.out" 2>/dev/null)
  failed_cases=$(grep -Ec '^case +[0-9]+ \[[A-J]\] FAIL' "$rr.out" 2>/dev/null)
  case "$(cat "$rr.rc")" in
    0) printf 'PASS\t%s\n' "$(tail -n 1 "$rr.out")" > "$rr.verdict" ;;
    -) ;;
    124|137)
      if [ "$failed_cases" -gt 0 ]; then
        printf 'FAIL\t%s of %s finished cases failed before the time budget ran out\n' "$failed_cases" "$done_cases" > "$rr.verdict"
      else
        printf 'CUT\tstopped by the time budget after %s of 50 cases (all of those passed)\n' "$done_cases" > "$rr.verdict"
      fi ;;
    *) printf 'FAIL\t%s\n' "$(tail -n 1 "$rr.out")" > "$rr.verdict" ;;
  esac
  flush
  if [ "$(cat "$rr.rc")" != "-" ] && [ -f logs/test_cases.log ]; then
    { printf '\n===== run_tests.sh'"'"'s own log (logs/test_cases.log) =====\n'; cat logs/test_cases.log; } >> "$LOG"
  fi
fi

# ---------------------------------------------------------------- summary
PASS=0; FAILN=0; SKIPN=0; MISSN=0
{
  printf '\n===== summary (%s%s) =====\n' "$DEVICE" "$([ "$DRY" = 1 ] && echo ', CPU DRY RUN: not an accelerator result')"
  printf '%-4s %-8s %-5s %7s  %s\n' "#" status exit "secs" "step — figures"
  for ((i = 1; i <= SEQ; i++)); do
    r="$WORK/rec/$(printf '%04d' "$i")"
    st="$(cut -f1 "$r.verdict")"; figs="$(cut -f2- "$r.verdict")"
    printf '%-4s %-8s %-5s %7s  %s — %s\n' "$i" "$st" "$(cat "$r.rc")" "$(cat "$r.secs")" "$(cat "$r.name")" "$figs"
  done
} >> "$LOG"
for ((i = 1; i <= SEQ; i++)); do
  r="$WORK/rec/$(printf '%04d' "$i")"
  case "$(cut -f1 "$r.verdict")" in
    PASS) PASS=$((PASS + 1)) ;;
    MISS) PASS=$((PASS + 1)); MISSN=$((MISSN + 1)) ;;
    SKIP|CUT) grep -q 'refused by this CLI' "$r.verdict" || SKIPN=$((SKIPN + 1)) ;;
    *) FAILN=$((FAILN + 1)) ;;
  esac
done
{
  echo
  echo "graphs flag: $GRAPHS$([ "$GRAPHS" = unsupported ] && echo ' (this CLI has no --graphs: benchmarks ran once per batch with its default)')"
  echo "low-precision results outside tol (recorded, not failures): $MISSN"
  echo "total wall: $(( $(date +%s) - STARTED )) s of a ${TIME_BUDGET} s budget"
  [ "$DRY" = 1 ] && echo "CPU DRY RUN: nothing here was measured on a GPU or an NPU."
} >> "$LOG"
echo "device_check: $PASS passed, $FAILN failed, $SKIPN skipped or cut by the time budget" | tee -a "$LOG"
echo "log: $LOG"
[ "$FAILN" -gt 0 ] && exit 1
[ "$SKIPN" -gt 0 ] && exit 3
exit 0
