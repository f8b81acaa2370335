"""A captured profile read back, without TensorFlow: the sessions a capture left (`sessions`), the numbers xprof's
converters give for each worker's file, read in a child process (`convert`: also how op time splits into input, compute and
communication), and the verdict a person reads (`verdict`: step time, shares, the straggler, what to fix)."""
