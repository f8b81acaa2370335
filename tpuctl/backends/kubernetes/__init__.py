"""The Kubernetes backend: a TFJob or JobSet applied and followed with kubectl."""
