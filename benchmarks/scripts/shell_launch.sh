#!/bin/bash
# The anchor for benchmarks/launch_overhead.py: the launcher people write by hand.
# Two workers on this machine, TF_CONFIG exported for each, both started in the
# background, then wait for both. Each worker's output goes to its own log file,
# as tpuctl's --log-dir does.
#
#   bash shell_launch.sh PYTHON SCRIPT PORT0 PORT1 LOG_DIR
set -u
python=$1 script=$2 port0=$3 port1=$4 log_dir=$5
cluster="{\"worker\": [\"127.0.0.1:$port0\", \"127.0.0.1:$port1\"]}"
export TF_USE_LEGACY_KERAS=1

export TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 0}}"
"$python" "$script" >"$log_dir/worker-0.log" 2>&1 &
pid0=$!

export TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 1}}"
"$python" "$script" >"$log_dir/worker-1.log" 2>&1 &
pid1=$!

status=0
wait "$pid0" || status=$?
wait "$pid1" || status=$?
exit "$status"
