"""`--rehearse ACCELERATOR` for a JAX script: the TPU's entry points watched as the script runs (watch.py), and what a
TPU would refuse or pay for, judged from what was seen (rules.py)."""
