"""The process engine: plans, the supervisor of attempts, and what it needs (ports, progress, stacks)."""
