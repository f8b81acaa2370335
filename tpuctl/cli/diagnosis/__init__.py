"""The commands that look into a machine or a run without changing it: `doctor` (can this machine run
TensorFlow), `stacks` (where every worker is now), `profile` (where a running run's step time goes) and
`report` (where a run's wall time went)."""
