"""`tpuctl tail`: checkpoints and TensorBoard summaries as they arrive, without TensorFlow."""
