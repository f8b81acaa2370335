"""The commands that set a project up before any run: `tpuctl auth` (credentials and the service identity's roles),
`tpuctl init` (project, zone, accelerator, runtime written once), `tpuctl config` (every setting and its source), and
`tpuctl new` (a training script from a template)."""
