"""A custom training loop in the style of TensorFlow's "Use TPUs" guide: its own TPUStrategy,
distribute_datasets_from_function, strategy.run inside tf.function, strategy.reduce.

With --defect (repeatable) it carries things a TPU refuses or runs poorly, for the rehearsal to find:
  uneven-batch   a global batch that does not split across the replicas (padded; refused with
                 --no-dynamic-batch, which turns the padder off in RunOptions)
  partial-batch  a dataset that ends, batched without drop_remainder (a partial last batch: a second program)
  endless-batch  .repeat().batch() without drop_remainder: the dataset never ends, no partial batch
  host-op        a tf.numpy_function inside the step (no XLA kernel: refused, or on the host with
                 --soft-placement, which calls tf.config.set_soft_device_placement(True))
  float64        the loss computed in float64 (slow)
  folded-float64 a scale worked out in float64 from the features' static size and a NumPy constant (folded
                 to a constant when XLA compiles the step: no float64 on the TPU)
  eager-step     strategy.run called without tf.function (refused)
With --print-feeds it prints one JSON line: whether tf.data autotunes its own pipeline and each
replica's feed (TensorFlow's internals: the distributed iterator's per-device iterators).
"""

import argparse
import json
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
DEFECTS = ["none", "uneven-batch", "partial-batch", "endless-batch", "host-op", "float64", "folded-float64", "eager-step"]
parser.add_argument("--defect", choices=DEFECTS, action="append", default=[])
parser.add_argument("--soft-placement", action="store_true")
parser.add_argument("--no-dynamic-batch", action="store_true")
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--print-feeds", action="store_true")
parser.add_argument("--hard-exit", action="store_true", help="leave through os._exit(0), as scripts that skip TF's slow shutdown do")
args = parser.parse_args()

if args.soft_placement:
    tf.config.set_soft_device_placement(True)
resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=os.environ.get("TPU_NAME", "local"))
tf.config.experimental_connect_to_cluster(resolver)
tf.tpu.experimental.initialize_tpu_system(resolver)
strategy = tf.distribute.TPUStrategy(resolver)
print("replicas:", strategy.num_replicas_in_sync)

per_replica_batch = 16
global_batch = per_replica_batch * strategy.num_replicas_in_sync
if "uneven-batch" in args.defect:
    global_batch += 3


def dataset_fn(input_context):
    batch = input_context.get_per_replica_batch_size(global_batch) if "uneven-batch" not in args.defect else global_batch
    x = tf.random.stateless_normal((1000, 8), seed=(1, 2))
    y = tf.cast(tf.reduce_sum(x, axis=1) > 0, tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    if "partial-batch" not in args.defect:
        dataset = dataset.repeat()
    dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    drop_remainder = not {"partial-batch", "endless-batch"} & set(args.defect)
    return dataset.batch(batch, drop_remainder=drop_remainder).prefetch(2)


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(0.1)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)

if "uneven-batch" in args.defect:
    dataset = strategy.experimental_distribute_dataset(dataset_fn(tf.distribute.InputContext()))
else:
    dataset = strategy.distribute_datasets_from_function(dataset_fn)
iterator = iter(dataset)


def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            if "float64" in args.defect:
                loss = tf.cast(tf.cast(loss, tf.float64) * 1.0, tf.float32)
            if "folded-float64" in args.defect:
                scale = tf.math.rsqrt(tf.cast(tf.shape(x)[1], tf.float64)) * np.sqrt(8.0)
                loss = loss * tf.cast(scale, tf.float32)
            loss = tf.nn.compute_average_loss(loss, global_batch_size=global_batch)
        if "host-op" in args.defect:
            tf.numpy_function(lambda value: print("host sees loss", value) or value, [loss], tf.float32)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    options = tf.distribute.RunOptions(experimental_enable_dynamic_batch_size=not args.no_dynamic_batch)
    per_replica = strategy.run(step_fn, args=(next(iterator),), options=options)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


if "eager-step" not in args.defect:
    train_step = tf.function(train_step)
for step in range(args.steps):
    loss = train_step(iterator)
    print(f"step {step + 1} loss {float(loss):.4f}", flush=True)

if args.print_feeds:
    worker = iterator._iterators[0]
    feeds = worker._iterator._device_iterators
    print(json.dumps({
        "script": "custom_loop",
        "pipeline_autotuned": worker._dataset.options().autotune.enabled is not False,  # unset: on
        "feeds_autotuned": [feed._dataset.options().autotune.enabled is not False for feed in feeds],
    }), flush=True)

model_dir = os.environ.get("TPUCTL_MODEL_DIR")
if model_dir:
    print("saved", checkpoint.save(os.path.join(model_dir, "ckpt")))
if args.hard_exit:
    os._exit(0)
