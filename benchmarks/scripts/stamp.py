"""The trivial command of benchmarks/ssh_fanout.py: record when it started running, then exit.

Writes time.time() to DIR/<pid>, DIR being its first argument.
"""
import os
import sys
import time

started = time.time()
with open(os.path.join(sys.argv[1], str(os.getpid())), "w") as f:
    f.write(repr(started))
