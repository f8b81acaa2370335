"""Process safety: nothing a run starts outlives it (`reaper`), the signals that stop a launch (`signals`), and where a
stuck worker is (`stack_dump` takes its Python stacks from outside, `stack_view` shows where each worker waits).
The runtime imports these inside every worker, so they stay standard-library only.
"""
