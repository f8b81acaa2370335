"""Settings and where each value comes from: one precedence order (flag > TPUCTL_* environment > ./tpuctl.toml >
the user's config file > gcloud's active configuration > default). `cloud` resolves the cloud settings with their
sources, `files` reads and edits the TOML files, `gcloud` reads gcloud's configuration without running gcloud.
"""
