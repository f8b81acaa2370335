"""TensorFlow's distributed-training guide (guide/distributed_training), its cells run top to bottom.

The guide builds a MirroredStrategy and trains with Keras first, and constructs
MultiWorkerMirroredStrategy() in a later cell, after TensorFlow has long started.
Every file goes under the working directory, as a notebook's would.
"""
import os

import numpy as np
import tensorflow as tf

# "Use tf.distribute.Strategy with Keras Model.fit"
mirrored_strategy = tf.distribute.MirroredStrategy()
with mirrored_strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1, kernel_regularizer=tf.keras.regularizers.L2(1e-4))])
    model.compile(loss="mse", optimizer="sgd")
dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
model.fit(
    dataset,
    epochs=2,
    verbose=0,
    callbacks=[
        tf.keras.callbacks.ModelCheckpoint("checkpoints/epoch-{epoch:02d}.weights.h5", save_weights_only=True),
        tf.keras.callbacks.BackupAndRestore("backup"),
    ],
)
model.save("mirrored.keras")

# "MultiWorkerMirroredStrategy" cell
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print("replicas in sync:", strategy.num_replicas_in_sync, flush=True)

# "Use tf.distribute.Strategy with custom training loops", with a checkpoint per epoch
with strategy.scope():
    loop_model = tf.keras.Sequential([tf.keras.Input(shape=(1,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD()
    checkpoint = tf.train.Checkpoint(model=loop_model, optimizer=optimizer)
manager = tf.train.CheckpointManager(checkpoint, "loop_checkpoints", max_to_keep=2)
dist_dataset = strategy.experimental_distribute_dataset(dataset)


@tf.function
def train_step(dist_inputs):
    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(loop_model(features, training=True) - labels))
        optimizer.apply_gradients(zip(tape.gradient(loss, loop_model.trainable_variables), loop_model.trainable_variables, strict=True))
        return loss

    return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(step_fn, args=(dist_inputs,)), axis=None)


for _epoch in range(2):
    for batch in dist_dataset:
        train_step(batch)
    manager.save()
np.save(os.path.join("loop_checkpoints", "weights.npy"), np.concatenate([w.ravel() for w in loop_model.get_weights()]))
