"""A Keras fit in the style of TensorFlow's tutorials, with BackupAndRestore saving every few steps.

For the time report's tests: `--preempt-at N` makes the first attempt end as a preempted
worker does (exit status 42) right after step N, past the last backup, so the second attempt
restores the backup and re-does the steps after it; `--hang-at N` stops making progress there.
Each step takes at least --step-time seconds, so the phases of the run are long enough to measure.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", default=os.environ.get("TPUCTL_MODEL_DIR", "/tmp/fit"))
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--save-every", type=int, default=4)
    parser.add_argument("--step-time", type=float, default=0.1)
    parser.add_argument("--preempt-at", type=int, default=0)
    parser.add_argument("--hang-at", type=int, default=0)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.steps * 8, 8)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8, drop_remainder=True)

    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    first_attempt = os.environ.get("TPUCTL_ATTEMPT", "1") == "1"

    class Pace(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: object = None) -> None:
            time.sleep(args.step_time)
            if first_attempt and args.preempt_at and batch + 1 == args.preempt_at:
                print(f"preempted after step {batch + 1}", flush=True)
                os._exit(42)
            if args.hang_at and batch + 1 == args.hang_at:
                print(f"stuck after step {batch + 1}", flush=True)
                time.sleep(3600)

    backup = tf.keras.callbacks.BackupAndRestore(os.path.join(args.model_dir, "backup"), save_freq=args.save_every)
    model.fit(dataset, epochs=1, verbose=0, callbacks=[backup, Pace()])
    print("trained", flush=True)


if __name__ == "__main__":
    main()
