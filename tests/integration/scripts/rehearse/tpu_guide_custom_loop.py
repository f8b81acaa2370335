"""The custom-training-loop section of TensorFlow's "Use TPUs" guide, in Keras 3's API: TPUClusterResolver,
initialize_tpu_system, TPUStrategy; model, `optimizer = tf.keras.optimizers.Adam()` and metrics created in
scope, distribute_datasets_from_function, a tf.function train_step whose step_fn calls
optimizer.apply_gradients inside strategy.run (so Adam builds its slots there, on the first step).
Generated images instead of MNIST; a smaller model and fewer steps. Prints one JSON line at the end."""

import json

import tensorflow as tf

resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
print("All devices: ", tf.config.list_logical_devices("TPU"))
strategy = tf.distribute.TPUStrategy(resolver)


def create_model():
    regularizer = tf.keras.regularizers.L2(1e-5)
    return tf.keras.Sequential([
        tf.keras.layers.Conv2D(16, 3, input_shape=(28, 28, 1), activation="relu", kernel_regularizer=regularizer),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(32, activation="relu", kernel_regularizer=regularizer),
        tf.keras.layers.Dense(10, kernel_regularizer=regularizer),
    ])


def get_dataset(batch_size, is_training=True):
    images = tf.random.stateless_uniform((1024, 28, 28, 1), seed=(1, 2))
    labels = tf.cast(tf.reduce_mean(images, axis=[1, 2, 3]) * 20, tf.int64) % 10
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    if is_training:
        dataset = dataset.shuffle(1024).repeat()
    return dataset.batch(batch_size, drop_remainder=True)


batch_size = 128
steps_per_epoch = 4

with strategy.scope():
    model = create_model()
    optimizer = tf.keras.optimizers.Adam()
    training_loss = tf.keras.metrics.Mean("training_loss", dtype=tf.float32)
    training_accuracy = tf.keras.metrics.SparseCategoricalAccuracy("training_accuracy", dtype=tf.float32)

per_replica_batch_size = batch_size // strategy.num_replicas_in_sync
train_dataset = strategy.distribute_datasets_from_function(lambda _: get_dataset(per_replica_batch_size, is_training=True))


@tf.function
def train_step(iterator):
    """The step function for one training step."""

    def step_fn(inputs):
        """The computation to run on each TPU device."""
        images, labels = inputs
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            per_example_loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example_loss)
            model_losses = model.losses
            if model_losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
        training_loss.update_state(loss * strategy.num_replicas_in_sync)
        training_accuracy.update_state(labels, logits)

    strategy.run(step_fn, args=(next(iterator),))


train_iterator = iter(train_dataset)
for epoch in range(2):
    print("Epoch: {}/2".format(epoch))
    for step in range(steps_per_epoch):
        train_step(train_iterator)
    print("Current step: {}, training loss: {}, training accuracy: {}%".format(
        optimizer.iterations.numpy(), round(float(training_loss.result()), 4), round(float(training_accuracy.result()) * 100, 2)))
    training_loss.reset_state()
    training_accuracy.reset_state()

print(json.dumps({"replicas": strategy.num_replicas_in_sync, "steps": int(optimizer.iterations.numpy()), "slots": len(optimizer.variables)}))
