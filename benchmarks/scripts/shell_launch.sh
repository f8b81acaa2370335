#!/bin/bash
# The anchor for benchmarks/launch_overhead.py: the launcher people write by hand.
# One worker per port on this machine, TF_CONFIG exported for each, all started in
# the background, then wait for all. Each worker's output goes to its own log file,
# as tpuctl's --log-dir does.
#
#   bash shell_launch.sh PYTHON SCRIPT PORT... LOG_DIR
set -u
python=$1 script=$2
shift 2
log_dir=${!#}
ports=("${@:1:$#-1}")
workers=""
for port in "${ports[@]}"; do
  workers="$workers${workers:+, }\"127.0.0.1:$port\""
done
cluster="{\"worker\": [$workers]}"
export TF_USE_LEGACY_KERAS=1

pids=()
for index in "${!ports[@]}"; do
  export TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": $index}}"
  "$python" "$script" >"$log_dir/worker-$index.log" 2>&1 &
  pids+=($!)
done

status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?
done
exit "$status"
