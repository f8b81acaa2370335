"""A fix for TensorFlow's profiler crashing a worker when a profile stops: a small C library loaded before TensorFlow.

What crashes (measured with TensorFlow 2.21 on this project's machines, FIELD-NOTES "TensorFlow's on-demand profiler
can kill a worker"): stopping a profile, through the profiler server or in the worker alike, ends in
`TraceMeRecorder::Consume()` (xla/tsl/profiler/backends/cpu/traceme_recorder.cc). There a `TraceMe::ActivityStart`
/ `ActivityEnd` pair (a "split" event) whose end was recorded on another thread than its start is kept as a pointer
into that thread's `std::deque` of events until every thread is read; meanwhile the `std::vector<ThreadEvents>` that
holds those deques grows without a `reserve()` (the older tsl/ copy of the file had one), and since libstdc++'s
`std::deque` move constructor is not `noexcept`, growing copies the deques and frees the old ones. The pointer then
names freed memory, and merging the start's name into it frees a pointer the allocator never gave:
`free(): invalid pointer`, `double free or corruption`, SIGSEGV in `SplitEventTracker::FindStartAndMerge` (seen in a
worker's backtrace here). Under MultiWorkerMirroredStrategy every step of a worker that is not the collective group's
leader has such a pair: `CollectiveExecutor::CompleteParams` starts on a collective thread and ends on the gRPC
thread that receives the leader's answer (one per step: the instance cache is keyed by step). Whether a given stop
crashes depends on the order TensorFlow reads its threads in (a hash table's): 6 captures in 64 here (docs/profile.md).

The fix keeps split events away from TensorFlow's recorder: `TraceMeRecorder::Record(Event&&)`, which every TraceMe
calls through the dynamic linker's symbol table, is interposed by a function of the same (mangled) name in a library
loaded with RTLD_GLOBAL before TensorFlow is imported (TensorFlow's libraries, loaded later, bind to the first
definition in the global scope). It holds each start and, when the end comes, hands TensorFlow one complete event
(the start's name and time, the end's time): what the recorder would have merged, on the thread the activity ended on.
An end whose start came before the profile began is left out, as TensorFlow leaves such an end out of the trace.
Nothing changes while no profile records: TensorFlow calls Record only then.

The library relies on the layout of `TraceMeRecorder::Event` (a std::string name, then the start and end times,
int64 nanoseconds, negative for the activity id of a split event's missing half: tsl/profiler/backends/cpu/
traceme_recorder.h, the same in every TensorFlow release up to 2.21) and on libstdc++'s std::string (a pointer, a
length, then 16 bytes of inline buffer or the capacity). It is loaded only for TensorFlow versions checked
(TraceMeRecorder in the `tsl::profiler` namespace, up to 2.21); elsewhere `tpuctl profile` says it cannot capture a
multi-worker run safely. And it checks every event before it touches one: a name whose length and storage are not
what libstdc++'s std::string holds (as in a build with the old copy-on-write string, one pointer wide, where the
length's place holds the start time) turns the library off for good, and from then on every event reaches
TensorFlow's recorder as TensorFlow made it. It is compiled on first use with the host's C compiler (`cc -x c -`, as tpuctl's bind shim
is) into a private cache folder, and loaded from there.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see bootstrap.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

CHECKED_UP_TO = (2, 21)  # the newest TensorFlow whose TraceMeRecorder::Event this library was checked against
COMPILE_TIMEOUT_S = 60.0
SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define RECORD "_ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE"
#define SLOTS 4096

struct text { char *data; size_t length; union { char inline_buffer[16]; size_t capacity; } rest; };
struct event { struct text name; int64_t start_time; int64_t end_time; };
struct held { int64_t id; int64_t start_time; struct text name; };

static struct held held[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void (*record)(struct event *);
static void (*release)(void *);
static long joined;

void _ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE(struct event *event);

static void move_text(struct text *to, struct text *from) {
  if (from->data == from->rest.inline_buffer) {
    memcpy(to->rest.inline_buffer, from->rest.inline_buffer, sizeof to->rest.inline_buffer);
    to->data = to->rest.inline_buffer;
  } else {
    to->data = from->data;
    to->rest.capacity = from->rest.capacity;
  }
  to->length = from->length;
  from->data = from->rest.inline_buffer;
  from->length = 0;
  from->rest.inline_buffer[0] = 0;
}

static void drop_text(struct text *text) {
  if (text->data != text->rest.inline_buffer && release != 0) release(text->data);
  text->data = text->rest.inline_buffer;
  text->length = 0;
  text->rest.inline_buffer[0] = 0;
}

static int find_tensorflow(struct dl_phdr_info *info, size_t size, void *unused) {
  void *library, *found;
  (void)size; (void)unused;
  if (info->dlpi_name == 0 || info->dlpi_name[0] == 0) return 0;
  library = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (library == 0) return 0;
  found = dlsym(library, RECORD);
  if (found != 0 && found != (void *)_ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE) {
    record = (void (*)(struct event *))found;
    release = (void (*)(void *))dlsym(library, "_ZdlPv");
  }
  dlclose(library);
  return record != 0;
}

static void find_record(void) { dl_iterate_phdr(find_tensorflow, 0); }

int tpuctl_tracefix_bind(void) {
  pthread_once(&once, find_record);
  return record != 0 && release != 0 && dlsym(RTLD_DEFAULT, RECORD) == (void *)_ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE;
}

long tpuctl_tracefix_joined(void) { return joined; }

static struct held *slot_of(int64_t id) { return &held[((uint64_t)id * 0x9E3779B97F4A7C15ull >> 20) % SLOTS]; }

/* A std::string of libstdc++'s new ABI: its text inline (at most 15 characters) or on the heap within its capacity. */
static int plausible(const struct text *text) {
  if (text->length > (1u << 24)) return 0;
  if (text->data == text->rest.inline_buffer) return text->length < sizeof text->rest.inline_buffer;
  return text->data != 0 && text->rest.capacity >= text->length && text->rest.capacity <= (1u << 24);
}

static volatile int foreign;  /* an event not laid out as this library reads it was seen: pass every one on as it is */

long tpuctl_tracefix_foreign(void) { return foreign; }

void _ZN3tsl8profiler15TraceMeRecorder6RecordEONS1_5EventE(struct event *event) {
  struct held *slot;
  int complete = 1;
  pthread_once(&once, find_record);
  if (record == 0 || release == 0) return;
  if (foreign || !plausible(&event->name)) {
    foreign = 1;
    record(event);
    return;
  }
  if (event->end_time < 0) {
    slot = slot_of(-event->end_time);
    pthread_mutex_lock(&lock);
    if (slot->id != 0) drop_text(&slot->name);
    slot->name.data = slot->name.rest.inline_buffer;
    move_text(&slot->name, &event->name);
    slot->id = -event->end_time;
    slot->start_time = event->start_time;
    pthread_mutex_unlock(&lock);
    return;
  }
  if (event->start_time < 0) {
    slot = slot_of(-event->start_time);
    pthread_mutex_lock(&lock);
    complete = slot->id == -event->start_time;
    if (complete) {
      drop_text(&event->name);
      move_text(&event->name, &slot->name);
      event->start_time = slot->start_time;
      slot->id = 0;
      joined++;
    }
    pthread_mutex_unlock(&lock);
  }
  if (complete) record(event);
}
"""

_handle: int | None = None


def _say(message: str) -> None:
    print(f"tpuctl: {message}", file=sys.stderr, flush=True)


def load(environ: Mapping[str, str]) -> str | None:
    """Load the library before TensorFlow is imported; None when loaded, else why not (said once by the caller)."""
    global _handle
    if "tensorflow" in sys.modules:
        return "TensorFlow was imported before tpuctl's runtime could load its fix"
    if not sys.platform.startswith("linux"):
        return f"tpuctl's fix for it is for Linux only (this is {sys.platform})"
    from tpuctl.runtime import tf_version

    _, version = tf_version.find()
    if version is None or version[0] != 2 or version > CHECKED_UP_TO:
        shown = "an unknown TensorFlow" if version is None else f"TensorFlow {version[0]}.{version[1]}"
        return f"tpuctl's fix for it was checked with TensorFlow up to {CHECKED_UP_TO[0]}.{CHECKED_UP_TO[1]}, not {shown}"
    try:
        path = _built(environ)
        import _ctypes

        _handle = int(_ctypes.dlopen(path, os.RTLD_NOW | os.RTLD_GLOBAL))
    except (OSError, ValueError) as err:
        return f"tpuctl's fix for it is not available here ({str(err).strip()[:200]})"
    return None


def active() -> bool:
    """After TensorFlow's import: whether TensorFlow's TraceMe events go through the library (its Record is the one bound)."""
    return _call("tpuctl_tracefix_bind") == 1


def joined() -> int:
    """How many split events the library has handed TensorFlow as complete ones (0 where it is not loaded)."""
    return _call("tpuctl_tracefix_joined")


def _call(name: str) -> int:
    if _handle is None:
        return 0
    import _ctypes

    return int(_ctypes.call_function(_ctypes.dlsym(_handle, name), ()))


def _built(environ: Mapping[str, str]) -> str:
    """The compiled library in the user's private cache folder, compiled there first where it is not yet."""
    import zlib

    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(cache, "tpuctl", "tracefix")
    path = os.path.join(folder, f"tracefix-{zlib.crc32(SOURCE.encode()):08x}-{os.uname().machine}.so")
    try:
        _checked(path, folder)
        return path
    except FileNotFoundError:
        pass
    _compile(path, folder, environ)
    _checked(path, folder)
    return path


def _checked(path: str, folder: str) -> None:
    """A library someone else could have written is never loaded: this user's own file, in this user's own folder,
    neither writable by others (tpuctl/inputs/private_files.py's rule for every folder tpuctl writes into)."""
    import stat

    for where, kind in ((folder, stat.S_ISDIR), (path, stat.S_ISREG)):
        info = os.lstat(where)
        if not kind(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            raise ValueError(f"{where} is not a private {'folder' if kind is stat.S_ISDIR else 'file'} of this user's")


def _compile(path: str, folder: str, environ: Mapping[str, str]) -> None:
    """`cc -x c -` into a temporary file beside `path`, renamed into place: a worker starting beside this one finds
    nothing or the whole library."""
    import shutil
    import subprocess
    from pathlib import Path

    from tpuctl.endings import exit_words
    from tpuctl.inputs.private_files import private_dir
    from tpuctl.safety import reaper

    wanted = environ.get("CC", "").split()
    compiler = next((found for name in (wanted[:1] or ["cc", "gcc", "clang"]) if (found := shutil.which(name))), None)
    if compiler is None:
        raise ValueError("no C compiler: " + ("$CC " + wanted[0] if wanted else "cc, gcc or clang") + " is not on PATH")
    private_dir(Path(folder))
    partial = f"{path}.{os.getpid()}.tmp"
    argv = [compiler, "-x", "c", "-shared", "-fPIC", "-O2", "-o", partial, "-", "-ldl", "-lpthread"]
    try:
        done = reaper.run(argv, input=SOURCE.encode(), capture_output=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            said = next((line for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()), exit_words(done.returncode))
            raise ValueError(f"{compiler} failed: {said.strip()}")
        os.chmod(partial, 0o700)
        os.replace(partial, path)
    except subprocess.TimeoutExpired:
        raise ValueError(f"{compiler} took over {COMPILE_TIMEOUT_S:g}s") from None
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
