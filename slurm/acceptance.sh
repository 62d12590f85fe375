#!/usr/bin/env bash
# The first run on a GPU node with no network (docs/doctor.md): install the project from a wheelhouse
# into a virtual environment over the node's own Python (its torch, transformers, ...: nothing of
# theirs is replaced unless the project needs another version), then `populora doctor` with a time
# budget. The doctor rewrites its report after every stage, so OUT holds one even if this is cut short.
#
#   slurm/acceptance.sh WHEELHOUSE OUT [doctor arguments ...]      # from the project's checkout
#   slurm/acceptance.sh - OUT [doctor arguments ...]               # a rehearsal: no install, PYTHON's populora
#
# Environment: PYTHON (the node's interpreter, default python3), BUDGET_S (the doctor's --budget-s,
# default 540), VENV (default $TMPDIR/populora-acceptance). Exit status: the doctor's (docs/doctor.md),
# or 2 when the environment or the offline install cannot be made. Everything goes to OUT/acceptance.log.
set -u
[ $# -ge 2 ] || { echo "usage: slurm/acceptance.sh WHEELHOUSE OUT [doctor arguments ...]" >&2; exit 2; }
[ -f pyproject.toml ] || { echo "acceptance: run it from the project's checkout (no pyproject.toml here)" >&2; exit 2; }
if [ "$1" = - ]; then wh=-; else wh=$(cd "$1" && pwd) || { echo "acceptance: wheelhouse $1 not found" >&2; exit 2; }; fi
out=$2; shift 2
mkdir -p "$out" && out=$(cd "$out" && pwd)
log=$out/acceptance.log
py=${PYTHON:-python3}
venv=${VENV:-${TMPDIR:-/tmp}/populora-acceptance}
budget=${BUDGET_S:-540}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || echo "no nvidia-smi"
    "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
} >>"$log" 2>&1

if [ "$wh" = - ]; then  # the rehearsal: the doctor as PYTHON has it installed, everything else as below
    echo "no wheelhouse: a rehearsal with the populora of $py, nothing installed" >>"$log"
    timeout -k 20 $((${budget%.*} + 60)) "$py" -m populora.cli doctor --budget-s "$budget" --out "$out/doctor" "$@" >>"$log" 2>&1
    rc=$?
    echo "doctor exit $rc" >>"$log"
    tail -n 3 "$log"
    exit $rc
fi

# 1. a virtual environment that sees the node's packages; its own pip, else the node's pip aimed at it.
#    When the node's Python is itself a virtual environment, --system-site-packages would see past it
#    to the interpreter it was made from: its site-packages are added with a .pth file instead.
rm -rf "$venv"
if "$py" -m venv --system-site-packages "$venv" >>"$log" 2>&1; then
    pip=("$venv/bin/python" -m pip)
elif rm -rf "$venv" && "$py" -m venv --without-pip --system-site-packages "$venv" >>"$log" 2>&1; then
    pip=("$py" -m pip --python "$venv/bin/python")
else
    echo "acceptance: cannot make a virtual environment with $py (see $log)" | tee -a "$log" >&2; exit 2
fi
if [ "$("$py" -c 'import sys; print(sys.prefix != sys.base_prefix)')" = True ]; then
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    "$py" -c 'import site; print("\n".join(site.getsitepackages()))' >"$site/_node_packages.pth"
    echo "the node's Python is a virtual environment: its site-packages added through $site/_node_packages.pth" >>"$log"
fi
t0=$SECONDS
if ! "${pip[@]}" install --disable-pip-version-check -q --no-index --find-links "$wh" . >>"$log" 2>&1; then
    echo "acceptance: the offline install failed (see $log)" | tee -a "$log" >&2; tail -n 5 "$log" >&2; exit 2
fi
echo "offline install: $((SECONDS - t0)) s; $("$venv/bin/python" -m pip --version 2>/dev/null || echo "pip via $py")" >>"$log"
"$venv/bin/python" -c 'import importlib.metadata as m; print(" ".join(f"{p} {m.version(p)}" for p in ("populora", "peft", "omegaconf", "trueskill")))' >>"$log" 2>&1

# 2. the doctor, with a hard stop a minute after its own budget (SIGTERM: it writes the report, then stops)
timeout -k 20 $((${budget%.*} + 60)) "$venv/bin/populora" doctor --budget-s "$budget" --out "$out/doctor" "$@" >>"$log" 2>&1
rc=$?
echo "doctor exit $rc" >>"$log"
tail -n 3 "$log"
exit $rc
