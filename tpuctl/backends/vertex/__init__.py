"""The Vertex AI backend: a CustomJob submitted and followed over REST."""
