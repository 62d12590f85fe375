#!/usr/bin/env bash
# The acceptance plan of a GPU node lent for 15 minutes, in two calls of at most 9 minutes each
# (docs/doctor.md, "The acceptance plan"): each installs the project offline from the carried wheelhouse
# and runs `populora doctor` with a time budget and a hard stop (slurm/acceptance.sh), writing its report
# under OUT as it goes.
#
#   slurm/acceptance-plan.sh a WHEELHOUSE OUT [doctor arguments ...]
#       the stages the first run (2026-11-27) skipped: the baseline's training (its rate sets the
#       estimates that follow), the GPU tests, the 8T+8S training step (memory beside the plan, MFU) and
#       its HF arms; no self-play step
#   slurm/acceptance-plan.sh b WHEELHOUSE OUT [doctor arguments ...]
#       the self-play step alone (4T+4S against the baseline at 4t4s-7b's shapes, random weights, the HF
#       engine), after one training step of 4t4s-7b timed through each update strategy (fused, sequential)
#
# WHEELHOUSE `-` rehearses without installing (tests/test_doctor_acceptance.py runs both calls so on CPU,
# with `--device cpu` and tiny presets). Environment: as slurm/acceptance.sh; BUDGET_S (default: a 390,
# b 270 seconds: with the hard stop a minute after the budget and the install, call a ends within 8.3
# minutes and call b within 6.5); PRESETS (the presets of the call, space-separated, instead of the 7B
# ones).
set -u
[ $# -ge 3 ] || { echo "usage: slurm/acceptance-plan.sh a|b WHEELHOUSE OUT [doctor arguments ...]" >&2; exit 2; }
part=$1; shift
case $part in
    a) budget=${BUDGET_S:-390}; presets=${PRESETS:-configs/baseline-7b.yaml configs/8t8s-7b.yaml}
       args=(--tests --no-step) ;;
    b) budget=${BUDGET_S:-270}; presets=${PRESETS:-configs/4t4s-7b.yaml}
       # two sequences per member (the preset's 4 would double the two timed training steps)
       args=(--only training,step --strategies policy.train_micro_batch=2) ;;
    *) echo "acceptance-plan: the call is a or b, got $part" >&2; exit 2 ;;
esac
configs=()
for p in $presets; do configs+=(--config "$p"); done
BUDGET_S=$budget exec bash "$(dirname "$0")/acceptance.sh" "$1" "$2" --gpu-gib 80 "${configs[@]}" "${args[@]}" "${@:3}"
