"""Parameter-server training on an in-process cluster, as TensorFlow's parameter-server tutorial
starts it (its create_in_process_cluster, with ports picked by the socket module instead of portpicker).
The strategy talks to these servers only: TF_CONFIG is never read."""
import socket

import tensorflow as tf


def free_port():
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def create_in_process_cluster(num_workers, num_ps):
    cluster_dict = {
        "worker": ["localhost:%s" % free_port() for _ in range(num_workers)],
        "ps": ["localhost:%s" % free_port() for _ in range(num_ps)],
    }
    cluster_spec = tf.train.ClusterSpec(cluster_dict)
    for i in range(num_workers):
        tf.distribute.Server(cluster_spec, job_name="worker", task_index=i, protocol="grpc", start=True)
    for i in range(num_ps):
        tf.distribute.Server(cluster_spec, job_name="ps", task_index=i, protocol="grpc", start=True)
    return tf.distribute.cluster_resolver.SimpleClusterResolver(cluster_spec, rpc_layer="grpc")


resolver = create_in_process_cluster(num_workers=2, num_ps=1)
strategy = tf.distribute.ParameterServerStrategy(resolver)
with strategy.scope():
    weight = tf.Variable(3.0)
print("variable on", weight.device)
