"""Keras 3 on JAX, one process, BackupAndRestore saving every --save-every steps into the model dir: a run that a
preemption may cut anywhere and that goes on from its last backup. Each step takes at least --step-time seconds."""

import argparse
import os
import time

os.environ["KERAS_BACKEND"] = "jax"

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--save-every", type=int, default=4)
parser.add_argument("--step-time", type=float, default=0.1)
args = parser.parse_args()

rng = np.random.default_rng(0)
x = rng.normal(size=(args.steps * 8, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Pace(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(args.step_time)


backup = keras.callbacks.BackupAndRestore(os.path.join(os.environ["TPUCTL_MODEL_DIR"], "backup"), save_freq=args.save_every)
model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[backup, Pace()])
print(f"trained on {keras.backend.backend()}", flush=True)
