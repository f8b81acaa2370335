"""Where a worker's messages point: the script's lines, never tpuctl's runtime between them.

The script runs under runpy, below the bootstrap, and some of its calls pass through the runtime's
wrappers (the strategy constructors it watches, the TPU calls it bounds). TensorFlow names the
caller of a deprecated function by counting frames up from its own wrapper, so a deprecated
strategy built by the script was said to come "From .../tpuctl/runtime/deferred.py:108"; a
traceback began with a dozen frames of runpy and the bootstrap. Both are counted again here,
skipping the runtime's frames.
"""

from __future__ import annotations

import os
import sys

from tpuctl.runtime import after_import

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from types import FrameType, ModuleType, TracebackType

RUNTIME = os.path.dirname(os.path.abspath(__file__))
_RUNPY = ("<frozen runpy>", os.path.splitext(getattr(sys.modules.get("runpy"), "__file__", None) or "runpy.py")[0] + ".py")


def is_runtime(filename: str) -> bool:
    """A frame of tpuctl's runtime or of the runpy that runs the script."""
    return filename in _RUNPY or os.path.dirname(filename) == RUNTIME


def name_the_script_in_deprecations() -> None:
    """TensorFlow's deprecation notices name the script's line (once TensorFlow loads; it is not imported here)."""
    after_import.when_imported("tensorflow.python.util.deprecation", _patch_call_location)


def _patch_call_location(module: ModuleType) -> None:
    if not hasattr(module, "_call_location"):
        return  # a TensorFlow that counts otherwise: its own words stand

    def call_location(outer: bool = False) -> str:
        # As TensorFlow's: two up (this function, the deprecation wrapper), one more for `outer`.
        frame = sys._getframe(2)
        if outer and frame.f_back is not None:
            frame = frame.f_back
        caller: FrameType | None = frame
        while caller is not None and is_runtime(caller.f_code.co_filename):
            caller = caller.f_back
        chosen = caller or frame  # runtime frames all the way up: the runtime's own call, named as it is
        return f"{chosen.f_code.co_filename}:{chosen.f_lineno}"

    module.__dict__["_call_location"] = call_location


def from_the_script(tb: TracebackType | None) -> TracebackType | None:
    """A traceback without its leading runtime frames: it starts where `python SCRIPT` would."""
    start = tb
    while start is not None and is_runtime(start.tb_frame.f_code.co_filename):
        start = start.tb_next
    return start or tb
