"""TensorFlow's "Distributed training with Keras" tutorial (tutorials/distribute/keras), with tf-keras as
TensorFlow 2.16+ users keep it (TF_USE_LEGACY_KERAS=1 before TensorFlow loads), then its multi-worker
sequel's BackupAndRestore under a MultiWorkerMirroredStrategy built after the first training.
MNIST is replaced by generated images of the same shape; every file goes under the working directory.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
images = rng.random((256, 28, 28, 1)).astype("float32")
labels = rng.integers(0, 10, size=256)

strategy = tf.distribute.MirroredStrategy()
print("Number of devices:", strategy.num_replicas_in_sync, flush=True)
BATCH_SIZE = 32 * strategy.num_replicas_in_sync
train_dataset = tf.data.Dataset.from_tensor_slices((images, labels)).cache().shuffle(256).batch(BATCH_SIZE)

with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.Adam(), metrics=["accuracy"])

checkpoint_dir = "./training_checkpoints"
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt_{epoch}")


def decay(epoch):
    return 1e-3 if epoch < 1 else 1e-4


callbacks = [
    tf.keras.callbacks.TensorBoard(log_dir="./logs", profile_batch=0),
    tf.keras.callbacks.ModelCheckpoint(filepath=checkpoint_prefix, save_weights_only=True),
    tf.keras.callbacks.LearningRateScheduler(decay),
]
model.fit(train_dataset, epochs=2, callbacks=callbacks, verbose=0)
model.load_weights(tf.train.latest_checkpoint(checkpoint_dir))
print("Eval loss, accuracy:", model.evaluate(train_dataset, verbose=0), flush=True)
model.save("mnist_model.keras")

# The multi-worker tutorial's strategy, in a later cell: its model trains with BackupAndRestore and a checkpoint.
multi_worker = tf.distribute.MultiWorkerMirroredStrategy()
with multi_worker.scope():
    restored = tf.keras.models.load_model("mnist_model.keras")
restored.fit(train_dataset, epochs=2, verbose=0, callbacks=[
    tf.keras.callbacks.BackupAndRestore(backup_dir="./backup"),
    tf.keras.callbacks.ModelCheckpoint(filepath="./multi_worker/ckpt_{epoch}", save_weights_only=True),
])
