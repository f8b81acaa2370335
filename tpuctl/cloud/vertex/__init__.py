"""Vertex AI: custom jobs and their Cloud Logging entries over REST, and what a project needs (APIs, roles, the
staging bucket's grants) before `tpuctl launch --backend vertex` can run a job there."""
