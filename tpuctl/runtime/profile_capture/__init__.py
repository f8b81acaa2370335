"""`tpuctl profile` inside the worker: the requests its reaper hands on (requests.py), and the fix that makes stopping
a profile safe in a multi-worker run (tracefix.py). The captures themselves are tpuctl/runtime/timeline/profiler.py's,
the same start and stop as `launch --profile`'s window."""
