"""Laptop and TPU, the same TensorFlow: this machine's TensorFlow and Keras (here.py), the TPU image's beside them and what
differs that matters (pair.py), the image `--new-tpu` picks for them (choice.py), and the cached environments a rehearsal
runs an image's TensorFlow in (envs.py, rehearsal.py). docs/environments.md, "Laptop and TPU"."""
