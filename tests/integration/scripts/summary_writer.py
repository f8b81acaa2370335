"""Writes TF2 summaries and checkpoints step by step, the way training does, and records what it wrote.

argv: MODEL_DIR STEPS EXPECTED.json. validation/ appears only halfway, as a new run would.
"""

import json
import sys
import time

import numpy as np
import tensorflow as tf

model_dir, steps, expected_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
train = tf.summary.create_file_writer(f"{model_dir}/train")
validation = None
variable = tf.Variable(0.0)
manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=variable), f"{model_dir}/checkpoints", max_to_keep=100)
expected = []
for step in range(steps):
    loss = float(np.float32(1.0 / (step + 1)))
    with train.as_default(step=step):
        tf.summary.scalar("loss", loss)
        tf.summary.scalar("accuracy", float(np.float32(step / steps)))
        tf.summary.histogram("weights", np.arange(10.0) * step)
        tf.summary.image("sample", np.zeros((1, 4, 4, 1), dtype=np.float32))
        tf.summary.text("note", f"step {step}")
    expected += [["train", "loss", step, loss], ["train", "accuracy", step, float(np.float32(step / steps))]]
    train.flush()
    if step == steps // 2:
        validation = tf.summary.create_file_writer(f"{model_dir}/validation")
    if validation is not None:
        with validation.as_default(step=step):
            tf.summary.scalar("loss", loss * 2)
        validation.flush()
        expected.append(["validation", "loss", step, float(np.float32(loss * 2))])
    if step % 5 == 4:
        variable.assign(float(step))
        manager.save(checkpoint_number=step)
    time.sleep(0.05)
with open(expected_path, "w") as handle:
    json.dump(expected, handle)
print("writer done", flush=True)
