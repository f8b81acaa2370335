"""TensorBoard's own writer (tensorboard.summary.Writer): metadata with a data class, value in float_val."""

import sys

from tensorboard.summary import Writer

writer = Writer(sys.argv[1])
for step in (0, 1, 200):
    writer.add_scalar("loss", 1.0 / (step + 1), step=step)
writer.close()
