"""Which elements of a tf.data range each worker gets, for each auto-shard policy named in argv."""

import json
import sys

import tensorflow as tf

from tpuctl import runtime

strategy = runtime.strategy()
for name in sys.argv[1:]:
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, name)
    dataset = tf.data.Dataset.range(16).batch(4).with_options(options)
    seen: list[int] = []
    for batch in strategy.experimental_distribute_dataset(dataset):
        for local in strategy.experimental_local_results(batch):
            seen += [int(x) for x in local.numpy()]
    print("seen " + json.dumps({"policy": name, "worker": runtime.worker_index(), "elements": sorted(seen)}))
print("write_dir " + runtime.write_dir("gs://b/run"))
