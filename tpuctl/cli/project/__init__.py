"""Commands that start a project: `tpuctl new` (tpuctl/cli/ itself is at its 20-module limit)."""
