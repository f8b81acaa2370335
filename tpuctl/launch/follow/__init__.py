"""The job engine: follow a job on a cluster (Kubernetes, Vertex AI) to its end, whatever the cluster."""
