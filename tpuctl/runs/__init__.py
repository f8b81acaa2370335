"""A run's folder and the registry of running launches (its record, the TPU VM it ran on as a value): what every command
that looks at a run reads."""
