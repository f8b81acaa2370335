"""Custom training loop under MirroredStrategy, as TensorFlow's distributed custom-training tutorial writes it."""
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL_BATCH = 16
x = np.random.rand(64, 8).astype("float32")
y = np.random.randint(0, 3, size=(64,))
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
dist_dataset = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(3)])
    optimizer = tf.keras.optimizers.Adam()
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def train_step(inputs):
    features, labels = inputs
    with tf.GradientTape() as tape:
        logits = model(features, training=True)
        loss = tf.nn.compute_average_loss(loss_object(labels, logits), global_batch_size=GLOBAL_BATCH)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def distributed_train_step(inputs):
    per_replica = strategy.run(train_step, args=(inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


for epoch in range(2):
    total = 0.0
    for batch in dist_dataset:
        total += float(distributed_train_step(batch))
    print(f"epoch {epoch}: loss {total:.4f}")
