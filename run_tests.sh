#!/usr/bin/env bash
# Replays the original NPU adaptation's 50 published cases (section 5), same commands and numbers, as a user runs
# them, into logs/test_cases.log: per case a header (number, command, exit code, verdict) and
# the full output, appended as each case ends (an interrupted run keeps every finished case).
#
# Every case states its pass rule below: the exit code plus the fact the output must show
# (actions in [-1, 1], identical draws, tolerance met, file written, equal to another case).
#
#   DEVICE=auto|cpu|cuda:0|npu:0   device for every case (default auto)
#   SECOND_DEVICE=npu:1            second card for cases 44, 49, 50 (skipped, not passed, without)
#   PYTHON=python3                 interpreter (default: python)
set -u
cd "$(dirname "$0")"
PY="${PYTHON:-python}"
DEVICE="${DEVICE:-auto}"
SECOND="${SECOND_DEVICE:-}"
LOG="logs/test_cases.log"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p logs

{
  echo "# run_tests.sh — $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "# device=${DEVICE} second_device=${SECOND:-none} python=$("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1)"
  echo "# model: HUGGY_MODEL_DIR=${HUGGY_MODEL_DIR:-unset} (unset: Hub cache, else the bundled sample)"
} > "$LOG"

# The pass rule of each kind of case, in words (tools/check_cases.py is the same rule in code).
declare -A RULE_TEXT=(
  [info]="exit 0 and SUCCESS; parameter count shown; deterministic actions in [-1, 1]"
  [checkpoints]="exit 0 and SUCCESS; at least one checkpoint listed and the default named"
  [action]="exit 0 and SUCCESS; action[:8] and the action range inside [-1, 1]"
  [sample]="exit 0 and SUCCESS; sampled#1 == sampled#2 (same seed); sampled != deterministic; all in [-1, 1]"
  [batch]="exit 0 and SUCCESS; output range inside [-1, 1]; batch[0] within 1e-5 of case 3 (the same observation alone)"
  [precision]="exit 0 and SUCCESS; max_abs_err against float64 < LIMIT (zero allowed) and cos >= 0.999"
  [precision_lowp]="exit 0 or 1, agreeing with the measurement (exit 0 iff cos >= 0.999 and max_abs_err < 0.01); the original NPU adaptation's bf16 missed 0.01 on the real weights"
  [onnx]="exit 0 and SUCCESS; max_abs_err < 1e-4 and cos >= 0.999999 against ML-Agents' ONNX"
  [fingerprint]="exit 0 and SUCCESS; two runs identical; sha256 printed; first action in [-1, 1]"
  [stats]="exit 0 and SUCCESS; LIMIT rollouts, every action in [-1, 1]"
  [benchmark]="exit 0 and SUCCESS; 0 < p50 <= p95 <= p99 <= max"
  [export]="exit 0 and SUCCESS; the ONNX file freshly written; max_abs_err against ML-Agents' ONNX <= 1e-5"
)
describe() {  # describe RULE -> the rule in words
  local kind="${1%%:*}" arg="" text
  [ "$kind" != "$1" ] && arg="${1#*:}"
  text="${RULE_TEXT[$kind]}"
  case "$kind" in
    precision|stats) text="${text//LIMIT/$arg}" ;;
    action) [ -n "$arg" ] && text="$text; actions identical to case $arg" ;;
    fingerprint) [ -n "$arg" ] && text="$text; first action equals case $arg's sampled#1" ;;
  esac
  printf '%s' "$text"
}

declare -A PASS FAIL SKIP
GROUPS_ORDER="A B C D E F G H I J"
for g in $GROUPS_ORDER; do PASS[$g]=0; FAIL[$g]=0; SKIP[$g]=0; done
FAILED_CASES=""

# case NUM GROUP RULE DEVICE_KIND -- ARGS...   (DEVICE_KIND: main | second)
case_() {
  local num="$1" group="$2" rule="$3" which="$4"; shift 5
  local dev="$DEVICE"
  if [ "$which" = second ]; then
    if [ -z "$SECOND" ]; then
      SKIP[$group]=$((SKIP[$group] + 1))
      printf '\n===== case %s [%s] SKIPPED: needs SECOND_DEVICE (e.g. npu:1) =====\n' "$num" "$group" >> "$LOG"
      printf 'case %2s [%s] SKIP (no SECOND_DEVICE)\n' "$num" "$group"
      return
    fi
    dev="$SECOND"
  fi
  local cmd=("$PY" inference.py "$@" --device "$dev")
  local out="$WORK/case_${num}.out" started code verdict
  started="$(date +%s.%N)"
  "${cmd[@]}" > "$out" 2>&1
  code=$?
  verdict="$("$PY" tools/check_cases.py "$rule" "$out" "$code" "$WORK" "$started" 2>&1 | tail -n 1)"
  case "$verdict" in
    PASS*) PASS[$group]=$((PASS[$group] + 1)) ;;
    *) FAIL[$group]=$((FAIL[$group] + 1)); FAILED_CASES="$FAILED_CASES $num" ;;
  esac
  {
    printf '\n===== case %s [%s] =====\n' "$num" "$group"
    printf 'command: python %s\n' "${cmd[*]:1}"
    printf 'rule: %s\nexit code: %s | verdict: %s\n--- output ---\n' "$(describe "$rule")" "$code" "$verdict"
    cat "$out"
  } >> "$LOG"
  printf 'case %2s [%s] %s\n' "$num" "$group" "$verdict"
}

CUSTOM="$("$PY" -c 'print(",".join("%.2f" % (-2 + 4 * i / 58) for i in range(59)))')"  # -2.00,-1.93,...,2.00

# A: environment and model information
case_ 1  A info          main -- --mode info
case_ 2  A checkpoints   main -- --mode checkpoints
# B: deterministic actions
case_ 3  B action        main -- --mode action --obs random --seed 0
case_ 4  B action        main -- --mode action --obs random --seed 1
case_ 5  B action        main -- --mode action --obs random --seed 2
case_ 6  B action        main -- --mode action --obs zeros
case_ 7  B action        main -- --mode action --obs ones
case_ 8  B action        main -- --mode action --obs ones_neg
case_ 9  B action        main -- --mode action --obs boundary
case_ 10 B action        main -- --mode action --obs 0.5
case_ 11 B action        main -- --mode action --obs -0.5
case_ 12 B action:7      main -- --mode action --obs 1
case_ 13 B action:8      main -- --mode action --obs -1
case_ 14 B action        main -- --mode action --obs "$CUSTOM" --seed 5
case_ 15 B action        main -- --mode action --obs random --seed 0 --dtype float16
case_ 16 B action        main -- --mode action --obs random --seed 0 --dtype bfloat16
case_ 17 B action        main -- --mode action --obs 2
# C: sampled actions
case_ 18 C sample        main -- --mode sample --obs random --seed 0
case_ 19 C sample        main -- --mode sample --obs random --seed 1
case_ 20 C sample        main -- --mode sample --obs zeros
case_ 21 C sample        main -- --mode sample --obs ones --seed 2
case_ 22 C sample        main -- --mode sample --obs random --seed 3 --dtype float16
case_ 23 C sample        main -- --mode sample --obs random --seed 3 --dtype bfloat16
# D: batches
case_ 24 D batch         main -- --mode batch --batch 16
case_ 25 D batch         main -- --mode batch --batch 32
case_ 26 D batch         main -- --mode batch --batch 64
case_ 27 D batch         main -- --mode batch --batch 128
case_ 28 D batch         main -- --mode batch --batch 512
# E: precision against a float64 reference
case_ 29 E precision:1e-4    main -- --mode precision --dtype float32
case_ 30 E precision_lowp    main -- --mode precision --dtype float16
case_ 31 E precision_lowp    main -- --mode precision --dtype bfloat16
# F: against ML-Agents' ONNX
case_ 32 F onnx          main -- --mode onnx-compare --batch 64 --seed 7
case_ 33 F onnx          main -- --mode onnx-compare --batch 32 --seed 0
case_ 34 F onnx          main -- --mode onnx-compare --batch 128 --seed 42
# G: action-sequence fingerprints
case_ 35 G fingerprint   main -- --mode fingerprint --seed 7 --steps 64
case_ 36 G fingerprint   main -- --mode fingerprint --seed 42 --steps 32 --deterministic
case_ 37 G fingerprint:18 main -- --mode fingerprint --seed 0 --steps 128
# H: closed-loop rollouts (synthetic dynamics)
case_ 38 H stats:5       main -- --mode stats --rollouts 5 --steps 50
case_ 39 H stats:8       main -- --mode stats --rollouts 8 --steps 100
case_ 40 H stats:3       main -- --mode stats --rollouts 3 --steps 30 --deterministic
# I: latency
case_ 41 I benchmark     main -- --mode benchmark --runs 200 --seed 0
case_ 42 I benchmark     main -- --mode benchmark --runs 100 --seed 0 --dtype float16
case_ 43 I benchmark     main -- --mode benchmark --runs 300 --seed 0 --dtype bfloat16
case_ 44 I benchmark     second -- --mode benchmark --runs 100 --seed 1
# J: export and second card
case_ 45 J export        main -- --mode export-onnx
case_ 46 C sample        main -- --mode sample --obs -0.5 --seed 4
case_ 47 C sample        main -- --mode sample --obs boundary --seed 5
case_ 48 D batch         main -- --mode batch --batch 512
case_ 49 E precision:1e-4 second -- --mode precision --dtype float32
case_ 50 J action        second -- --mode action --obs random --seed 9

TP=0; TF=0; TS=0
{
  printf '\n===== summary by group =====\n'
  printf '%-28s %6s %6s %7s\n' group passed failed skipped
  for g in $GROUPS_ORDER; do
    case $g in A) name="A info";; B) name="B deterministic";; C) name="C sampled";; D) name="D batch";;
      E) name="E precision";; F) name="F onnx-compare";; G) name="G fingerprint";; H) name="H stats";;
      I) name="I benchmark";; J) name="J export + second card";; esac
    printf '%-28s %6s %6s %7s\n' "$name" "${PASS[$g]}" "${FAIL[$g]}" "${SKIP[$g]}"
  done
} | tee -a "$LOG"
for g in $GROUPS_ORDER; do TP=$((TP + PASS[$g])); TF=$((TF + FAIL[$g])); TS=$((TS + SKIP[$g])); done
[ -n "$FAILED_CASES" ] && echo "failed cases:$FAILED_CASES" | tee -a "$LOG"
echo "log: $LOG"
echo "$TP passed, $TF failed, $TS skipped" | tee -a "$LOG"
[ "$TF" -eq 0 ]
