"""The worker's part of the run's timeline (tpuctl/runs/timeline.py): Keras fit's steps and checkpoints, told to the launcher.

hooks.py installs what watches them; channel.py sends each line without ever making a step wait;
profiler.py keeps the same steps for profiling (the profiler server, step markers, `launch --profile`).
"""
