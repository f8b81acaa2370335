"""Worker output on the console and in the log files: tags, colour, TensorFlow's start-up noise, --tail."""
