"""The Vertex AI backend: the script and tpuctl's runtime staged as a bundle, a CustomJob built once for the dry run
and the run, submitted and followed over REST with its Cloud Logging entries."""
