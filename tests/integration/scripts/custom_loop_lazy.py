"""A custom training loop written as TensorFlow's "Custom training with tf.distribute.Strategy" tutorial
writes it, in Keras 3's API: its own MirroredStrategy, a model without an input shape (built by its first
call, inside strategy.run), `optimizer = tf.keras.optimizers.Adam()` created in scope and built lazily by
the first apply_gradients inside strategy.run, experimental_distribute_dataset, a tf.train.Checkpoint.
Generated images instead of Fashion-MNIST. Prints one JSON line at the end."""

import json
import os
import sys

import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
train_images = rng.random((512, 28, 28, 1), dtype=np.float32)
train_labels = (train_images.reshape(512, -1).mean(axis=1) > 0.5).astype(np.int64) + 2 * (train_images[:, 0, 0, 0] > 0.5)
test_images = rng.random((128, 28, 28, 1), dtype=np.float32)
test_labels = (test_images.reshape(128, -1).mean(axis=1) > 0.5).astype(np.int64)

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))

BUFFER_SIZE = len(train_images)
BATCH_SIZE_PER_REPLICA = 32
GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
EPOCHS = 2

train_dataset = tf.data.Dataset.from_tensor_slices((train_images, train_labels)).shuffle(BUFFER_SIZE, seed=1).batch(GLOBAL_BATCH_SIZE)
test_dataset = tf.data.Dataset.from_tensor_slices((test_images, test_labels)).batch(GLOBAL_BATCH_SIZE)
train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)


def create_model():
    regularizer = tf.keras.regularizers.L2(1e-5)
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, 3, activation="relu", kernel_regularizer=regularizer),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(16, activation="relu", kernel_regularizer=regularizer),
        tf.keras.layers.Dense(4, kernel_regularizer=regularizer),
    ])


checkpoint_dir = os.path.join(os.environ.get("TPUCTL_MODEL_DIR") or sys.argv[1], "training_checkpoints")
checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")

with strategy.scope():
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

    def compute_loss(labels, predictions, model_losses):
        per_example_loss = loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

with strategy.scope():
    test_loss = tf.keras.metrics.Mean(name="test_loss")
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    test_accuracy = tf.keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")

with strategy.scope():
    model = create_model()
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.001)
    checkpoint = tf.train.Checkpoint(optimizer=optimizer, model=model)


def train_step(inputs):
    images, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions, model.losses)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_accuracy.update_state(labels, predictions)
    return loss


def test_step(inputs):
    images, labels = inputs
    predictions = model(images, training=False)
    test_loss.update_state(loss_object(labels, predictions))
    test_accuracy.update_state(labels, predictions)


@tf.function
def distributed_train_step(dataset_inputs):
    per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


@tf.function
def distributed_test_step(dataset_inputs):
    return strategy.run(test_step, args=(dataset_inputs,))


losses = []
for epoch in range(EPOCHS):
    total_loss = 0.0
    num_batches = 0
    for x in train_dist_dataset:
        total_loss += distributed_train_step(x)
        num_batches += 1
    train_loss = total_loss / num_batches
    losses.append(float(train_loss))
    for x in test_dist_dataset:
        distributed_test_step(x)
    checkpoint.save(checkpoint_prefix)
    print("Epoch {}, Loss: {}, Accuracy: {}, Test Loss: {}, Test Accuracy: {}".format(
        epoch + 1, train_loss, train_accuracy.result() * 100, test_loss.result(), test_accuracy.result() * 100))
    test_loss.reset_state()
    train_accuracy.reset_state()
    test_accuracy.reset_state()

# Every replica's copy of every variable is the same (the optimizer's included), as after any synchronous step.
in_sync = all(
    all(np.array_equal(strategy.experimental_local_results(v)[0].numpy(), c.numpy()) for c in strategy.experimental_local_results(v))
    for v in [w.value for w in model.weights + optimizer.variables]
)
print(json.dumps({
    "keras": tf.keras.__version__ if hasattr(tf.keras, "__version__") else "tf-keras",
    "replicas": strategy.num_replicas_in_sync,
    "steps": int(optimizer.iterations.numpy()),
    "losses_finite": bool(np.all(np.isfinite(losses))),
    "replicas_in_sync": in_sync,
    "checkpoint": os.path.basename(tf.train.latest_checkpoint(checkpoint_dir)),
}))
