"""A worker's process: the bootstrap runs the script, then the exit skips the collector's passes over TensorFlow.

CPython's shutdown runs the cyclic garbage collector several times while it tears modules down, and each full pass
over the ~280,000 objects TensorFlow and Keras leave tracked costs ~0.13 CPU-s: a worker's exit took 0.7-0.9 CPU-s,
a quarter of a short worker's whole CPU. So once the script is done, one collection finalizes what it left
unreachable (its namespace, its cyclic objects, as the shutdown would have), and `gc.freeze()` leaves everything
still alive (the libraries' state) to the process's end. atexit handlers still run after it (TensorFlow's own,
`weakref.finalize`, multiprocessing's), and what a script left unflushed still lands: an open summary writer's
events, one held in a reference cycle, an unclosed tf.io.gfile file (tests/integration/test_worker_exit.py).
"""

import gc
import sys

from tpuctl.runtime.bootstrap import main

try:
    main()
finally:
    if "tensorflow" in sys.modules:  # without TensorFlow the shutdown's passes are short: nothing to skip
        gc.collect()
        gc.freeze()
