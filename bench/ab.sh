#!/usr/bin/env bash
# A/B: two or more dlbench binaries or flag sets, run interleaved (A B A B ...) on one machine.
#
#   bench/ab.sh --results FILE --label NAME=SPEC --label NAME=SPEC [options]
#
# SPEC is "[VAR=VALUE ...] BINARY [FLAGS ...]", split on spaces: the variables are set for that side's runs
# only, the flags are added to its `bench` command. For every repetition, model, precision and batch, each
# side runs once in the order given, so that machine drift falls on all sides alike; every run is
#   BINARY bench --device DEV --model M --precision P --batch-size B --steps S --warmup-steps W ARGS FLAGS
#         --json LOGS/<run>.json
# and appends one JSON line to FILE: label, binary, flags, env, model, precision, batch, rep, rc, and from
# the result object images_per_second (a GPT model's sequences/s), tokens_per_second, mfu,
# peak_memory_bytes, step_ms_median, algorithm_digest, sm_clock_median_mhz, power_capped_fraction,
# seconds_to_first_timed_step, date and system. Last it prints the median img/s (sequences/s) of each side
# per point and its ratio to the first side (B/A), which is the tokens/s ratio too.
#
# Options:
#   --results FILE       JSON Lines file the runs are appended to (required)
#   --label NAME=SPEC    one side (at least two); NAME: letters, digits, '.', '_', '-'
#   --models LIST        comma-separated (resnet50)
#   --precisions LIST    comma-separated (fp16)
#   --batches LIST       comma-separated (256)
#   --reps N             repetitions of the whole interleaved round (2)
#   --steps N            timed steps (40); --warmup N: warm-up steps (8)
#   --device DEV         (cuda)
#   --args "FLAGS"       flags every side gets (e.g. "--algorithm-cache /tmp/alg.json"); repeatable
#   --env FILE           a file sourced once before the runs (e.g. a GPU machine's library set-up)
#   --lib-path DIR       prepended to LD_LIBRARY_PATH; repeatable
#   --torch-libs [DIR]   prepend the cuDNN, CUDA and NCCL libraries of a Python environment's NVIDIA wheels
#                        (default /opt/torch/.venv/lib/python3.12/site-packages), as the GPU machine needs for
#                        binaries built elsewhere
#   --logs DIR           each run's log and result JSON (default: a temporary folder)
#   --timeout S          seconds per run (600)
#   --dry-run            print the commands, run nothing, write nothing
#   -h, --help
#
# NCCL_NVLS_ENABLE=0 is set (NVLink multicast stays off on shared machines). Exit status: 0 when every run
# wrote a result, 3 when some did not (their lines have rc and a null images_per_second), 1 on a usage error.
set -uo pipefail

die() { echo "ab.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"; }

RESULTS="" MODELS=resnet50 PRECISIONS=fp16 BATCHES=256 REPS=2 STEPS=40 WARMUP=8 DEVICE=cuda
ARGS="" ENV_FILE="" LOGS="" TIMEOUT=600 DRY=0 LIBS=()
NAMES=() SPECS=()
need() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"; }
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "$1 wants a positive integer, not '$2'"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --results) need "$@"; RESULTS=$2; shift 2 ;;
    --label)
      need "$@"
      [[ "$2" == *=* ]] || die "--label wants NAME=SPEC, not '$2'"
      name=${2%%=*} spec=${2#*=}
      [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "--label: bad name '$name' (letters, digits, '.', '_', '-')"
      for n in "${NAMES[@]+"${NAMES[@]}"}"; do [[ "$n" != "$name" ]] || die "--label: '$name' given twice"; done
      [[ -n "${spec// /}" ]] || die "--label $name: no binary"
      NAMES+=("$name"); SPECS+=("$spec"); shift 2 ;;
    --models) need "$@"; MODELS=$2; shift 2 ;;
    --precisions) need "$@"; PRECISIONS=$2; shift 2 ;;
    --batches) need "$@"; BATCHES=$2; shift 2 ;;
    --reps) need "$@"; posint "$1" "$2"; REPS=$2; shift 2 ;;
    --steps) need "$@"; posint "$1" "$2"; STEPS=$2; shift 2 ;;
    --warmup) need "$@"; [[ "$2" =~ ^[0-9]+$ ]] || die "--warmup wants a number, not '$2'"; WARMUP=$2; shift 2 ;;
    --device) need "$@"; DEVICE=$2; shift 2 ;;
    --args) need "$@"; ARGS="$ARGS $2"; shift 2 ;;
    --env) need "$@"; [[ -f "$2" ]] || die "--env: no file $2"; ENV_FILE=$2; shift 2 ;;
    --lib-path) need "$@"; LIBS+=("$2"); shift 2 ;;
    --torch-libs)
      sp=/opt/torch/.venv/lib/python3.12/site-packages
      if [[ $# -ge 2 && "$2" != --* ]]; then sp=$2; shift; fi
      LIBS+=("$sp/nvidia/cudnn/lib" "$sp/nvidia/cu13/lib" "$sp/nvidia/nccl/lib"); shift ;;
    --logs) need "$@"; LOGS=$2; shift 2 ;;
    --timeout) need "$@"; posint "$1" "$2"; TIMEOUT=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help lists the options)" ;;
  esac
done
[[ -n "$RESULTS" ]] || die "--results FILE is required"
[[ ${#NAMES[@]} -ge 2 ]] || die "at least two --label NAME=SPEC are needed, ${#NAMES[@]} given"
IFS=, read -ra MODEL_LIST <<<"$MODELS"; IFS=, read -ra PREC_LIST <<<"$PRECISIONS"; IFS=, read -ra BATCH_LIST <<<"$BATCHES"
[[ ${#MODEL_LIST[@]} -gt 0 && ${#PREC_LIST[@]} -gt 0 && ${#BATCH_LIST[@]} -gt 0 ]] || die "empty --models, --precisions or --batches"
for b in "${BATCH_LIST[@]}"; do [[ "$b" =~ ^([1-9][0-9]*|max)$ ]] || die "--batches: bad batch '$b'"; done
command -v python3 >/dev/null || die "python3 is needed to read the result objects"

# Each side: its variables, binary and flags.
declare -a S_ENV S_BIN S_FLAGS
for i in "${!SPECS[@]}"; do
  read -ra words <<<"${SPECS[$i]}"
  envs=() j=0
  while [[ $j -lt ${#words[@]} && "${words[$j]}" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do envs+=("${words[$j]}"); j=$((j + 1)); done
  [[ $j -lt ${#words[@]} ]] || die "--label ${NAMES[$i]}: no binary after the variables"
  S_ENV[$i]="${envs[*]+"${envs[*]}"}"; S_BIN[$i]=${words[$j]}; S_FLAGS[$i]="${words[*]:$((j + 1))}"
  if [[ $DRY -eq 0 ]]; then
    [[ -x "${S_BIN[$i]}" ]] || command -v "${S_BIN[$i]}" >/dev/null || die "--label ${NAMES[$i]}: no binary at ${S_BIN[$i]}"
  fi
done

export NCCL_NVLS_ENABLE=0
if [[ ${#LIBS[@]} -gt 0 ]]; then
  joined=$(IFS=:; echo "${LIBS[*]}")
  export LD_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# shellcheck disable=SC1090
[[ -n "$ENV_FILE" && $DRY -eq 0 ]] && source "$ENV_FILE"
if [[ $DRY -eq 0 ]]; then
  LOGS=${LOGS:-$(mktemp -d)}
  mkdir -p "$LOGS" "$(dirname "$RESULTS")" || die "cannot create $LOGS or the folder of $RESULTS"
fi

failed=0
for rep in $(seq 1 "$REPS"); do
  for m in "${MODEL_LIST[@]}"; do
    for p in "${PREC_LIST[@]}"; do
      for b in "${BATCH_LIST[@]}"; do
        for i in "${!NAMES[@]}"; do
          run="${NAMES[$i]}-$m-$p-$b-$rep"
          # shellcheck disable=SC2206
          cmd=(${S_BIN[$i]} bench --device "$DEVICE" --model "$m" --precision "$p" --batch-size "$b"
               --steps "$STEPS" --warmup-steps "$WARMUP" $ARGS ${S_FLAGS[$i]})
          if [[ $DRY -eq 1 ]]; then
            echo "${S_ENV[$i]:+${S_ENV[$i]} }${cmd[*]} --json \$LOGS/$run.json"
            continue
          fi
          rm -f "$LOGS/$run.json"
          # shellcheck disable=SC2086
          timeout "$TIMEOUT" env ${S_ENV[$i]} "${cmd[@]}" --json "$LOGS/$run.json" >"$LOGS/$run.log" 2>&1
          rc=$?
          python3 - "$LOGS/$run.json" "$RESULTS" "$rc" "${NAMES[$i]}" "${S_BIN[$i]}" "${S_FLAGS[$i]}" \
            "${S_ENV[$i]}" "$m" "$p" "$b" "$rep" <<'PY'
import json, sys
path, results, rc, label, binary, flags, env, model, precision, batch, rep = sys.argv[1:]
try:
    with open(path) as f:
        r = json.load(f)
except (OSError, ValueError):
    r = {}
clocks = r.get("gpu_clocks") or {}
line = {"label": label, "binary": binary, "flags": flags, "env": env, "model": model,
        "precision": precision, "batch": int(batch) if batch.isdigit() else batch, "rep": int(rep),
        "rc": int(rc), "images_per_second": r.get("images_per_second"),
        "tokens_per_second": r.get("tokens_per_second"), "mfu": r.get("mfu"),
        "peak_memory_bytes": r.get("peak_memory_bytes"),
        "step_ms_median": (r.get("step_ms") or {}).get("median"),
        "algorithm_digest": r.get("algorithm_digest"),
        "sm_clock_median_mhz": clocks.get("sm_clock_median_mhz"),
        "power_capped_fraction": clocks.get("power_capped_fraction"),
        "seconds_to_first_timed_step": r.get("seconds_to_first_timed_step"),
        "date": r.get("date"), "system": r.get("system")}
with open(results, "a") as f:
    f.write(json.dumps(line) + "\n")
ips, tps = line["images_per_second"], line["tokens_per_second"]
rate = f"{tps:,.0f} tokens/s" if tps else f"{ips:,.1f} img/s" if ips else ""
print(f"{label:>12} {model} {precision} b{batch} rep {rep}: rc={rc} "
      + (f"{rate}, step median {line['step_ms_median']} ms" if ips else "no result"))
sys.exit(0 if ips else 3)
PY
          [[ $? -eq 0 ]] || failed=1
        done
      done
    done
  done
done
[[ $DRY -eq 1 ]] && exit 0

# The summary: this invocation's lines (the last runs of the file).
runs=$((REPS * ${#MODEL_LIST[@]} * ${#PREC_LIST[@]} * ${#BATCH_LIST[@]} * ${#NAMES[@]}))
python3 - "$RESULTS" "$runs" "${NAMES[@]}" <<'PY'
import json, statistics, sys
results, runs, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
with open(results) as f:
    lines = [json.loads(l) for l in f if l.strip()][-runs:]
points = []
for l in lines:
    key = (l["model"], l["precision"], l["batch"])
    if key not in points:
        points.append(key)
print(f"{'point':<24}" + "".join(f"{n:>14}" for n in names) + "".join(f"{n + '/' + names[0]:>16}" for n in names[1:]))
for key in points:
    med = {}
    for n in names:
        v = [l["images_per_second"] for l in lines
             if (l["model"], l["precision"], l["batch"]) == key and l["label"] == n and l["images_per_second"]]
        med[n] = statistics.median(v) if v else None
    row = f"{key[0] + ' ' + key[1] + ' b' + str(key[2]):<24}"
    row += "".join(f"{med[n]:>14,.1f}" if med[n] else f"{'-':>14}" for n in names)
    a = med[names[0]]
    row += "".join(f"{med[n] / a:>16.4f}" if a and med[n] else f"{'-':>16}" for n in names[1:])
    print(row)
print(f"median img/s (GPT: sequences/s) of each side over its runs; {runs} runs appended to {results}")
PY
[[ $failed -eq 0 ]] || { echo "ab.sh: some runs wrote no result (rc and logs in $LOGS)" >&2; exit 3; }
