#!/usr/bin/env bash
# Issue 49's GPU check: a 2-process Keras 3 on JAX run through `tpuctl launch --workers 2`, one GPU each.
#
#   benchmarks/device/jax_gpu_split.sh            # from the repository's root, on a machine with GPUs and JAX
#
# tpuctl's local GPU split (tpuctl/devices/gpus.py) gives each process its own CUDA_VISIBLE_DEVICES; the run trains
# examples/train_keras_jax.py (DataParallel over both processes' GPUs, JAX's NCCL collectives) and passes when:
#   - the launch exits 0 and its plan is a JAX run,
#   - with 2+ GPUs: the plan gives process 0 and 1 one different GPU each and no XLA_PYTHON_CLIENT_PREALLOCATE,
#     with 1 GPU (both share it): the plan gives both XLA_PYTHON_CLIENT_PREALLOCATE=false (JAX's GPU memory guide),
#   - each process says it saw exactly 1 local device, a GPU, and 2 in all,
#   - both processes end with the same weights (the example prints a digest of them).
# No TensorFlow is needed. Keras, and what tpuctl's launcher imports that an image may lack, can come as wheels in
# .whl/ (installed into a temporary folder first): benchmarks/README.md, "Device checks", says which and how.
# Results go to $OUT (or a temporary folder): verdict.txt, launch.log, plan.json, worker-0.log, worker-1.log.
# Exit status: 0 PASS, 1 FAIL, 2 cannot run here (no GPU, no JAX or Keras); the whole check stops after
# JAX_GPU_CHECK_TIMEOUT seconds (default 300).
set -uo pipefail

LIMIT=${JAX_GPU_CHECK_TIMEOUT:-300}
EXPECT=${JAX_GPU_CHECK_PLATFORM:-gpu}  # the platform each process must see (cpu: a dry test of this script, with a stand-in nvidia-smi)
PY=${PYTHON:-python3}
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-$(mktemp -d)}
WORK=$(mktemp -d)
say() { echo "jax_gpu_split: $*" | tee -a "$OUT/verdict.txt"; }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" .whl/*.whl || { say "cannot install .whl/"; exit 2; }
  export PYTHONPATH="$WORK/site"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

versions=$(KERAS_BACKEND=jax "$PY" -c 'import jax, keras; print(f"jax {jax.__version__}, keras {keras.__version__}")' 2>"$WORK/probe.err") ||
  { say "needs jax and keras for $PY: $(tail -n 1 "$WORK/probe.err")"; exit 2; }
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)
if [ "$gpus" -lt 1 ]; then say "no GPU here (nvidia-smi lists none)"; exit 2; fi
mode=$([ "$gpus" -ge 2 ] && echo split || echo shared)
say "$gpus GPU(s), $versions, $("$PY" -c 'import sys; print(sys.version.split()[0])'); mode $mode"

# NCCL_DEBUG=WARN: NCCL's own reason for a refusal reaches the logs (two processes on one card: "Duplicate GPU detected").
timeout -k 10 "$LIMIT" "$PY" -m tpuctl launch examples/train_keras_jax.py --workers 2 --log-dir "$WORK/logs" --start-timeout 180 \
  --env NCCL_DEBUG=WARN -- --epochs 2 --examples 1024 >"$OUT/launch.log" 2>&1
status=$?
for file in plan.json worker-0.log worker-1.log; do cp "$WORK/logs/attempt-1/$file" "$OUT/" 2>/dev/null; done

"$PY" - "$OUT" "$status" "$mode" "$EXPECT" <<'CHECK' | tee -a "$OUT/verdict.txt"
import json, re, sys
out, status, mode, expect = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
problems = []
if status:
    problems.append(f"the launch exited {status}" + (" (stopped at the check's time limit)" if status in (124, 137) else ""))
try:
    plan = json.load(open(f"{out}/plan.json"))
except OSError:
    plan = None
    problems.append("no plan.json: the launch did not start")
if plan is not None:
    envs = [w["env"] for w in plan["workers"]]
    seen = [e.get("CUDA_VISIBLE_DEVICES") for e in envs]
    preallocate = [e.get("XLA_PYTHON_CLIENT_PREALLOCATE") for e in envs]
    if plan.get("framework") != "jax":
        problems.append(f"the plan's framework is {plan.get('framework')!r}, not jax")
    if mode == "split" and (None in seen or len(set(seen)) != 2 or any("," in s for s in seen) or any(preallocate)):
        problems.append(f"the plan should give each process one GPU of its own and no XLA_PYTHON_CLIENT_PREALLOCATE: {seen}, {preallocate}")
    if mode == "shared" and (seen[0] is None or seen[0] != seen[1] or preallocate != ["false", "false"]):
        problems.append(f"the plan should give both processes the one GPU and XLA_PYTHON_CLIENT_PREALLOCATE=false: {seen}, {preallocate}")
text = open(f"{out}/launch.log", errors="replace").read()
said = re.findall(r"process (\d) of (\d): .* on (\d+) device\(s\) \((\d+) here, (\w+)\), .*weights (\w+)", text)
if sorted(s[0] for s in said) != ["0", "1"]:
    problems.append(f"expected a line from each of 2 processes, found {len(said)}")
for process, count, total, here, platform, _ in said:
    if (count, total, here, platform) != ("2", "2", "1", expect):
        problems.append(f"process {process} saw {here} local device(s) ({platform}), {total} in all, in {count} process(es): not 1 {expect} of 2")
if "Duplicate GPU detected" in text:
    problems.append("NCCL refused two processes on one GPU (\"Duplicate GPU detected\"): JAX processes cannot share a card")
if len({s[5] for s in said}) > 1:
    problems.append(f"the processes' weights differ: {sorted(s[5] for s in said)}")
for line in problems:
    print(f"jax_gpu_split: FAIL: {line}")
if not problems:
    print(f"jax_gpu_split: PASS ({mode}): 2 processes, 1 {expect} each, the same weights ({said[0][5]})")
sys.exit(1 if problems else 0)
CHECK
verdict=${PIPESTATUS[0]}
[ "$verdict" -ne 0 ] && { echo "--- the launch's last lines"; tail -n 40 "$OUT/launch.log"; }
rm -rf "$WORK"
exit "$verdict"
