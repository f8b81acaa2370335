"""Keras 3 on JAX, data parallel over every device of every process, as keras-io's distribution guide writes it
(https://keras.io/guides/distribution/): initialize(), DataParallel over list_devices(), a plain fit. Each process
feeds its own shard of the data (auto_shard_dataset=False: the arrays are NumPy's, not a tf.data.Dataset)."""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"

import jax
import keras
import numpy as np

keras.distribution.initialize()
devices = keras.distribution.list_devices()
mesh = keras.distribution.DeviceMesh(shape=(len(devices),), axis_names=["batch"], devices=devices)
keras.distribution.set_distribution(keras.distribution.DataParallel(device_mesh=mesh, auto_shard_dataset=False))

rng = np.random.default_rng(jax.process_index())
x = rng.random((128, 16), dtype=np.float32)
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=16, epochs=2, verbose=0)
seen = {"processes": jax.process_count(), "devices": jax.device_count(), "local": jax.local_device_count()}
# TensorFlow's rehearsal (its stand-in TPUStrategy) is not loaded for a JAX script; Keras itself may load TensorFlow in a
# multi-process fit where it is installed (measured with Keras 3.15), which is the script's own affair.
print(json.dumps({"script": "jax_data_parallel", **seen, "tf_rehearsal": "tpuctl.runtime.rehearsal" in sys.modules}))
