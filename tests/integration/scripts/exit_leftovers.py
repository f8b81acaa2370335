"""A script that leaves its writers open and its garbage to the exit, as many scripts do.

usage: exit_leftovers.py OUT. Writes OUT/events (a tf.summary writer never flushed or closed, one more held in a
reference cycle), OUT/plain.txt (a tf.io.gfile file never closed), OUT/finalized (a cyclic object's finalizer,
once the object is garbage), OUT/after-import (whether the collector runs, and gc's frozen objects, once
TensorFlow is imported) and OUT/freeze-count (gc's frozen objects when atexit handlers run).
"""

import atexit
import gc
import os
import sys

import tensorflow as tf

out = sys.argv[1]
with open(os.path.join(out, "after-import"), "w") as handle:
    handle.write(f"{gc.isenabled()} {gc.get_freeze_count()}")

writer = tf.summary.create_file_writer(os.path.join(out, "events"))
with writer.as_default():
    for step in range(50):
        tf.summary.scalar("loss", 1.0 / (step + 1), step=step)


class Holder:
    """Only the cyclic collector frees it: it refers to itself."""

    def __init__(self) -> None:
        self.me = self
        self.writer = tf.summary.create_file_writer(os.path.join(out, "events", "cycle"))

    def __del__(self) -> None:
        open(os.path.join(out, "finalized"), "w").close()


holder = Holder()
with holder.writer.as_default():
    for step in range(50):
        tf.summary.scalar("accuracy", step / 50, step=step)
del holder

text = tf.io.gfile.GFile(os.path.join(out, "plain.txt"), "w")
text.write("x" * 6000)


def say_freeze_count() -> None:
    with open(os.path.join(out, "freeze-count"), "w") as handle:
        handle.write(str(gc.get_freeze_count()))


atexit.register(say_freeze_count)
