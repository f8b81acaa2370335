"""Who tpuctl acts as and what it may do: credentials, a project's IAM policy and its grants, the TPU service
identity, and the `tpuctl auth` flows that check and grant them (for TPU VMs and for Vertex AI's custom jobs)."""
