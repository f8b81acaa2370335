"""`tpuctl tail`: checkpoints and TensorBoard summaries as they arrive, without TensorFlow. Event files are read
incrementally (CRC-checked framing, a truncated last record picked up later, only new bytes read), checkpoints from
TensorFlow's `checkpoint` state file with their `.index`, from a local folder or a bucket, and shown live or as JSON."""
