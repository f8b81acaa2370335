"""TPU VMs through the Cloud TPU v2 API: the one client, a node as tpuctl reads it, what the user asked it to be
(its spec), idempotent lifecycle steps (create, wait, recreate, delete) with one create's terms and events as values,
a slice's hosts, a node's health (its condition, the wait for it to be READY again), the loop that keeps a command
running on it (`babysit`), and the label that ties a node to the run that made it."""
