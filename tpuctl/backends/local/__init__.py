"""The local backend: workers as process groups on this machine, their TensorFlow servers kept on loopback by a
bind() shim, and a rehearsal of a TPU run on this machine's CPU."""
