"""tpuctl's fix for TensorFlow's profiler crash (tpuctl/runtime/profile_capture/tracefix.py), against a stand-in for
TensorFlow's recorder: a library that defines `tsl::profiler::TraceMeRecorder::Record(Event&&)` as TensorFlow's does
and calls it as TensorFlow's TraceMe does (through the dynamic linker), so that the fix interposes it the same way.

What TensorFlow's recorder must never see again is a split event (an ActivityStart/ActivityEnd pair): its merge
across threads is what frees a pointer it never allocated (the module's docstring). The stand-in keeps what it is
given; a real worker under MultiWorkerMirroredStrategy is tests/integration/test_profile_collectives.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tpuctl.runtime.profile_capture import tracefix

# The recorder's Event as tsl/profiler/backends/cpu/traceme_recorder.h lays it out, a libstdc++ std::string first.
STAND_IN = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct text { char *data; size_t length; union { char inline_buffer[16]; size_t capacity; } rest; };
struct event { struct text name; int64_t start_time; int64_t end_time; };
static char seen[65536];
static size_t used;
long freed;
void _ZdlPv(void *p) { freed++; free(p); }
void _ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE(struct event *e) {
  used += snprintf(seen + used, sizeof seen - used, "%.*s|%lld|%lld\n", (int)e->name.length, e->name.data, (long long)e->start_time, (long long)e->end_time);
  if (e->name.data != e->name.rest.inline_buffer) _ZdlPv(e->name.data);  /* the recorder owns what it was given */
  e->name.data = e->name.rest.inline_buffer; e->name.length = 0;
}
void trace(const char *name, int64_t start, int64_t end) {  /* as TraceMe records: a temporary Event, moved from */
  struct event e;
  size_t n = strlen(name);
  e.name.length = n;
  if (n < 16) { e.name.data = e.name.rest.inline_buffer; memcpy(e.name.data, name, n + 1); }
  else { e.name.data = malloc(n + 1); memcpy(e.name.data, name, n + 1); e.name.rest.capacity = n; }
  e.start_time = start; e.end_time = end;
  _ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE(&e);
  if (e.name.data != e.name.rest.inline_buffer) _ZdlPv(e.name.data);  /* the temporary's destructor */
}
const char *recorded(void) { return seen; }
"""

LONG = "CollectiveExecutor::CompleteParams#group_key=1,group_size=2#"


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None, reason="the fix is built with the host's C compiler, on Linux")
def test_split_events_reach_the_recorder_as_complete_ones_and_nothing_else_changes(tmp_path: Path) -> None:
    stand_in = tmp_path / "libstandin.so"
    subprocess.run(["cc", "-x", "c", "-shared", "-fPIC", "-O2", "-o", str(stand_in), "-"], input=STAND_IN.encode(), check=True, timeout=60)
    code = textwrap.dedent(
        f"""
        import ctypes, os
        from tpuctl.runtime.profile_capture import tracefix
        assert tracefix.load(os.environ) is None
        tf = ctypes.CDLL({str(stand_in)!r})  # loaded after the fix, as TensorFlow is
        assert tracefix.active()
        trace = tf.trace
        trace.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64]
        activity = 5 << 32
        trace(b"complete", 10, 20)                     # a plain TraceMe: passed on as it is
        trace({LONG!r}.encode(), 30, -activity)        # ActivityStart: held
        trace(b"short", 31, -(activity + 1))           # ActivityStart, a name std::string keeps inline
        trace(b"", -(activity + 1), 45)                # ActivityEnd of the short one, on any thread
        trace(b"", -activity, 50)                      # ActivityEnd: one complete event
        trace(b"", -(activity + 7), 60)                # an end whose start came before the profile: left out
        tf.recorded.restype = ctypes.c_char_p
        print(tf.recorded().decode(), end="")
        print("joined", tracefix.joined())
        """
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["complete|10|20", "short|31|45", f"{LONG}|30|50", "joined 2"]
    built = list((tmp_path / "cache" / "tpuctl" / "tracefix").iterdir())
    assert len(built) == 1 and built[0].stat().st_mode & 0o077 == 0 and (tmp_path / "cache" / "tpuctl").stat().st_mode & 0o077 == 0


# The same recorder built with libstdc++'s old copy-on-write std::string (one pointer, _GLIBCXX_USE_CXX11_ABI=0): where
# the fix reads a length, this Event has its start time.
OLD_ABI = r"""
#include <stdint.h>
#include <stdio.h>
#include <string.h>
struct event { const char *name; int64_t start_time; int64_t end_time; };
static char seen[4096];
static size_t used;
void _ZdlPv(void *p) { (void)p; }
void _ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE(struct event *e) {
  used += snprintf(seen + used, sizeof seen - used, "%s|%lld|%lld\n", e->name, (long long)e->start_time, (long long)e->end_time);
}
void trace(const char *name, int64_t start, int64_t end) {
  struct event e = {name, start, end};
  _ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE(&e);
}
const char *recorded(void) { return seen; }
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("cc") is None, reason="the fix is built with the host's C compiler, on Linux")
def test_events_laid_out_otherwise_reach_the_recorder_untouched(tmp_path: Path) -> None:
    """An Event the fix cannot read as it expects (another std::string) turns it off: every event, split ones too,
    reaches the recorder exactly as it was made, and nothing is held or freed."""
    stand_in = tmp_path / "libold.so"
    subprocess.run(["cc", "-x", "c", "-shared", "-fPIC", "-O2", "-o", str(stand_in), "-"], input=OLD_ABI.encode(), check=True, timeout=60)
    code = textwrap.dedent(
        f"""
        import ctypes, os
        from tpuctl.runtime.profile_capture import tracefix
        assert tracefix.load(os.environ) is None
        tf = ctypes.CDLL({str(stand_in)!r})
        assert tracefix.active()
        trace = tf.trace
        trace.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64]
        activity = 5 << 32
        trace(b"start", 1765000000000000000, -activity)
        trace(b"end", -activity, 1765000000000000900)
        trace(b"complete", 1765000000000001000, 1765000000000002000)
        tf.recorded.restype = ctypes.c_char_p
        print(tf.recorded().decode(), end="")
        print("joined", tracefix.joined(), "foreign", tracefix._call("tpuctl_tracefix_foreign"))
        """
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"start|1765000000000000000|{-(5 << 32)}",
        f"end|{-(5 << 32)}|1765000000000000900",
        "complete|1765000000000001000|1765000000000002000",
        "joined 0 foreign 1",
    ]


def test_where_the_fix_cannot_be_built_the_worker_is_told_why(tmp_path: Path) -> None:
    code = "import os; from tpuctl.runtime.profile_capture import tracefix; print(tracefix.load(os.environ))"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "CC": "no-such-compiler", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "tpuctl's fix for it is not available here (no C compiler: $CC no-such-compiler is not on PATH)", done


def test_a_library_someone_else_could_have_written_is_never_loaded(tmp_path: Path) -> None:
    folder = tmp_path / "tracefix"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    (folder / "lib.so").write_bytes(b"")
    with pytest.raises(ValueError, match="is not a private folder"):
        tracefix._checked(str(folder / "lib.so"), str(folder))
    folder.chmod(0o700)
    (folder / "lib.so").chmod(0o666)
    with pytest.raises(ValueError, match="is not a private file"):
        tracefix._checked(str(folder / "lib.so"), str(folder))


def test_tensorflow_newer_than_the_one_checked_is_not_given_the_fix() -> None:
    """The fix depends on TraceMeRecorder::Event's layout, checked up to CHECKED_UP_TO: a newer TensorFlow gets none."""
    code = textwrap.dedent(
        """
        import os
        from tpuctl.runtime import tf_version
        from tpuctl.runtime.profile_capture import tracefix
        tf_version.find = lambda: ("/x", (2, 99))
        print(tracefix.load(os.environ))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == "tpuctl's fix for it was checked with TensorFlow up to 2.21, not TensorFlow 2.99", done
