"""A run's folder and the registry of running launches: what every command that looks at a run reads."""
