# The tpuctl agent: runs on a remote host as `python -S -c <source> <hello>`,
# where the source is wire.py's text followed by this file's (session.agent_source).
#
# One agent per worker, in the worker's own ssh session. It is sent as source
# text, so the host needs only Python (tpuctl itself for the worker runtime,
# not for this). It imports only modules the interpreter loads anyway, so that
# it starts in about 10 ms, and contains no backslash, so that it reads the
# same under any remote shell once quoted (unit tests check both). Comment
# lines are dropped before it is sent (docstrings would not be: the why is in
# comments). Like wire.py it keeps to syntax an old Python 3 reads: no
# f-strings, no variable annotations, annotations quoted.
#
# Messages both ways are "packed" (wire.pack): NUL-separated key, value, key,
# value... strings, UTF-8 (surrogateescape) and hex-encoded - one shell word, one line.
#
#   1. hello: create/enter the working directory, check the script, run the launch's
#      preflight checks when asked (the first agent on a host), bind a free
#      port and hold it (and a second one for the worker's profiler server when
#      the hello names profiler_fd), report on stderr: NONCE hello <packed port, ip, ...>.
#      The first agent on a host also checks the host's copy of tpuctl's runtime
#      (cache.py) and says why it cannot be used, if it cannot; tpuctl then sends
#      a fresh copy (install.py) before any worker starts.
#   2. read one line on stdin: <packed argv..., env...>; EOF instead = exit, nothing started.
#   3. start the worker in its own session / process group, with the held port
#      (worker_contract.RESERVED_FD; the profiler's as PROFILER_FD, its number as
#      PROFILER_PORT) and a control socket (CONTROL_FD) as a local
#      launch would, and report NONCE pgid N. Runtime messages ("ready") are
#      relayed as NONCE msg TEXT; a line longer than the hello's message_limit is
#      dropped as it comes and said as NONCE dropped.
#   4. stdin lines INT / TERM / KILL signal the worker group; STACKS asks the
#      worker's reaper for its stacks (relayed back as NONCE msg stacks HEX);
#      PROFILE SESSION MS asks it for a capture (answered as NONCE msg profile JSON); EOF (the
#      launcher or its connection is gone) ends the control socket, on which
#      the worker's reaper kills all it started; the group is killed 2 s later.
#   5. when the worker exits, kill what is left of its group, report
#      NONCE exit STATUS (negative: killed by that signal), exit.
#
# The worker writes stdout and stderr to the agent's stdout (the session's
# data channel); the agent writes only its NONCE lines to stderr.

import _socket
import os
import select
import sys

TYPE_CHECKING = False  # typing costs the agent's start; mypy treats this name as True
if TYPE_CHECKING:
    import signal as _signal
    from typing import NoReturn

    from tpuctl.backends.ssh.wire import manifest, manifest_pairs, pack, unpack

    # At run time these come from wire.py's and cache.py's text, sent ahead of this file's.
    from tpuctl.ssh.cache import runtime_problem, runtime_root
else:
    import _signal  # the C module: `signal` builds enums, which costs the start

NL = chr(10)
EOL = bytes([10])
HELLO = {}  # type: dict[str, list[str]]
NONCE = ""
SIGNALS = {"INT": _signal.SIGINT, "TERM": _signal.SIGTERM, "KILL": _signal.SIGKILL}


# One NONCE line on stderr, where the launcher looks for them.
def say(*words: object) -> None:
    line = " ".join([NONCE] + [str(word) for word in words]) + NL
    # try/except rather than contextlib.suppress, here and below: contextlib costs the start.
    try:  # noqa: SIM105
        os.write(2, line.encode("utf-8", "replace"))
    except OSError:
        pass


def fail(problem: str) -> "NoReturn":
    say("error", pack([("message", problem)]))
    os._exit(3)


# shutil.which without importing shutil (it costs the start).
def which(name: str) -> "str | None":
    for folder in os.environ.get("PATH", "").split(":"):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def hold_port() -> "_socket.socket":
    for family, anywhere in ((_socket.AF_INET, "0.0.0.0"), (_socket.AF_INET6, "::")):
        try:
            sock = _socket.socket(family, _socket.SOCK_STREAM)
            sock.bind((anywhere, 0))
            return sock
        except OSError:
            continue
    fail("cannot bind a free TCP port")


# Preflight (tpuctl/launch/preflight.py), asked of a host's first agent: TensorFlow (a JAX run: jax) on the sys.path a
# worker gets (site's, which -S left out; the launch's PYTHONPATH first), and no chip TensorFlow refuses ("VENDOR:DEVICE=why").
def preflight() -> None:
    module = "jax" if "jax" in HELLO else "tensorflow"
    if module in HELLO:
        import importlib.util
        import site

        site.main()
        sys.path[:0] = [folder for folder in HELLO[module][0].split(":") if folder]
        if importlib.util.find_spec(module) is None:
            fail("preflight: no " + {"jax": module}.get(module, "TensorFlow") + " for " + sys.executable)
    refused = dict(chip.split("=", 1) for chip in HELLO.get("chip", []))
    base = os.environ.get("TPUCTL_SYSFS_ROOT", "") + "/sys/bus/pci/devices/"
    for name in os.listdir(base) if refused and os.path.isdir(base) else []:
        key = []
        for part in ("vendor", "device"):
            try:
                with open(base + name + "/" + part) as handle:
                    key.append(handle.read().strip())
            except OSError:
                pass
        if ":".join(key) in refused:
            fail("preflight: " + refused[":".join(key)])


# Step 1: the working directory, the script, held ports; report them (and a manifest for --sync).
def hello() -> "list[_socket.socket]":
    for folder in HELLO.get("mkdir", []):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as err:
            fail("cannot create " + folder + ": " + str(err.strerror))
    cwd = HELLO["cwd"][0]
    # A relative folder is the session's, under home (docs/ssh.md): its manifest is read from there, after the chdir.
    sync = [os.path.abspath(f) for f in HELLO.get("sync", [])]
    try:
        os.chdir(cwd)
    except OSError as err:
        fail("cannot use working directory " + cwd + ": " + str(err.strerror))
    for script in HELLO.get("script", []):
        if not os.path.isfile(script):
            fail("script not found: " + os.path.join(os.getcwd(), script))
    preflight()
    held = [hold_port()] + [hold_port() for _ in HELLO.get("profiler_fd", [])]
    words = os.environ.get("SSH_CONNECTION", "").split()
    rsync = which("rsync") is not None
    report = [("profiler", str(sock.getsockname()[1])) for sock in held[1:]]
    report += [
        ("port", str(held[0].getsockname()[1])),
        ("ip", words[2] if len(words) == 4 else ""),
        ("hostname", _socket.gethostname()),
        ("rsync", "1" if rsync else ""),
    ]
    for folder in sync:
        if not HELLO.get("local_rsync", [""])[0] or not rsync:
            report.append(("manifest", folder))
            report += manifest_pairs(manifest(folder, HELLO.get("exclude", []))) if os.path.isdir(folder) else []
    digest = HELLO.get("runtime", [""])[0]
    if digest and HELLO.get("check_runtime"):
        problem = runtime_problem(digest)
        if problem.startswith("!"):
            fail(problem[1:] + "; tpuctl neither uses nor replaces it there (remove it)")
        report.append(("runtime", problem))
    say("hello", pack(report))
    return held


def read_line(pending: bytes) -> "tuple[bytes | None, bytes]":
    while EOL not in pending:
        chunk = os.read(0, 65536)
        if not chunk:
            return None, b""
        pending += chunk
    line, rest = pending.split(EOL, 1)
    return line, rest


# Step 2's line: the worker's argv, and its environment on top of the agent's. The worker's TF_CONFIG is the
# launch's or none (one worker gets none, as `python SCRIPT`), never one the host's shell profile exports.
def read_job(line: bytes) -> "tuple[list[str], dict[str, str]]":
    argv, env = [], {name: value for name, value in os.environ.items() if name != "TF_CONFIG"}
    for key, value in unpack(line.decode()):
        if key == "argv":
            argv.append(value)
        elif key == "env":
            name, _, text = value.partition("=")
            env[name] = text
    return argv, env


# fork and exec by hand (no subprocess module: it costs more to import than all the rest).
def spawn(argv: "list[str]", env: "dict[str, str]", keep: "tuple[int, ...]") -> "tuple[int, str | None]":
    errors, report = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(1, 2)
            for fd in keep:
                os.set_inheritable(fd, True)
            for name in ("SIGPIPE", "SIGXFSZ"):
                if hasattr(_signal, name):
                    _signal.signal(getattr(_signal, name), _signal.SIG_DFL)
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            os.write(report, str(err.strerror).encode())
        os._exit(127)
    os.close(report)
    problem = b""
    while True:
        chunk = os.read(errors, 4096)
        if not chunk:
            break
        problem += chunk
    os.close(errors)
    if problem:
        os.waitpid(pid, 0)
        return pid, problem.decode("utf-8", "replace")
    return pid, None


def kill(pid: int, sig: int) -> None:
    try:  # noqa: SIM105
        os.killpg(pid, sig)
    except OSError:
        pass


# Signal the worker group for each whole INT / TERM / KILL line, pass STACKS and PROFILE on to the
# worker's reaper (which checks a request's words itself); returns the unfinished rest.
def obey(pid: int, ours: "_socket.socket", pending: bytes) -> bytes:
    while EOL in pending:
        word, pending = pending.split(EOL, 1)
        word = word.strip()
        sig = SIGNALS.get(word.decode("ascii", "replace"))
        passed = b"stacks" if word == b"STACKS" else b"profile " + word[8:] if word.startswith(b"PROFILE ") else None
        if sig is not None:
            kill(pid, sig)
        elif passed is not None:
            try:  # noqa: SIM105
                ours.send(passed + EOL)
            except OSError:
                pass
    return pending


# Pass each whole line from the worker's control socket on as NONCE msg TEXT; returns the rest, and whether it is the
# rest of a line being dropped. A line longer than the hello's message_limit (the script can write to the socket) is
# dropped as it comes, never held whole, and said as NONCE dropped.
def relay(messages: bytes, dropping: bool) -> "tuple[bytes, bool]":
    limit = int(HELLO["message_limit"][0])
    while EOL in messages:
        message, messages = messages.split(EOL, 1)
        if dropping:
            dropping = False
        elif len(message) > limit:
            say("dropped")
        else:
            say("msg", message.decode("utf-8", "replace").strip())
    if not dropping and len(messages) > limit:
        say("dropped")
        dropping = True
    return (b"", True) if dropping else (messages, False)


# Steps 3 and 4 until the worker exits: its wait status.
#
# Waits on a pidfd where the kernel has them, else polls every 100 ms. Once
# stdin is gone the group was killed; 2 s later the agent leaves regardless.
def watch(pid: int, ours: "_socket.socket", pending: bytes) -> int:
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(ours.fileno(), select.POLLIN)
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(pid)
            poller.register(pidfd, select.POLLIN)
        except OSError:
            pidfd = None
    messages, dropping = b"", False
    give_up = None  # type: int | None
    pending = obey(pid, ours, pending)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if give_up is not None and give_up <= 0:
            kill(pid, _signal.SIGKILL)
            kill_adopted()
            os._exit(255)
        for fd, _ in poller.poll(100 if pidfd is None or give_up is not None else None):
            if fd == 0:
                chunk = os.read(0, 65536)
                if not chunk:
                    # The launcher or its connection is gone: nobody may outlive it. The
                    # worker's reaper (tpuctl/safety/reaper.py) kills all the worker started once
                    # its channel ends; a SIGKILL of the group now would kill the reaper
                    # first, so the group is killed only if it is still there 2 s later.
                    ours.shutdown(2)
                    poller.unregister(0)
                    give_up = 20
                    continue
                pending = obey(pid, ours, pending + chunk)
            elif fd == ours.fileno():
                chunk = os.read(fd, 65536)
                if not chunk:
                    poller.unregister(fd)
                    continue
                messages, dropping = relay(messages + chunk, dropping)
        if give_up is not None:
            give_up -= 1


# Orphans below the agent come to it, not to init (prctl PR_SET_CHILD_SUBREAPER, Linux only), so that a
# worker's child that left its group and lost its parents (os.setsid(), then its reaper killed) is still ours.
def adopt() -> None:
    try:
        import _ctypes

        _ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None), "prctl"), (36, 1, 0, 0, 0))  # type: ignore[arg-type]
    except (ImportError, OSError, AttributeError):
        pass


# Once the worker is reaped, every child the agent still has was adopted: kill it, reap it, and
# again for what its death hands on, until none is left (as tpuctl/safety/reaper.py does locally).
def kill_adopted() -> None:
    me = str(os.getpid()).encode()
    for _ in range(100):
        found = []
        for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
            try:
                with open("/proc/" + name + "/stat", "rb") as stat:
                    if name.isdigit() and stat.read().rsplit(b")", 1)[1].split()[1] == me:
                        found.append(int(name))
            except (OSError, IndexError):
                pass
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, _signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass


# Steps 2 to 5; the agent's own exit status.
def run(held: "list[_socket.socket]") -> int:
    line, pending = read_line(b"")
    if not line or not line.strip():
        return 0
    argv, env = read_job(line)
    digest = HELLO.get("runtime", [""])[0]
    if digest:
        # The shipped runtime first: it wins over a tpuctl the host's Python may have installed.
        folder = os.path.join(runtime_root(), digest)
        env["PYTHONPATH"] = folder + ":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else folder
    ours, theirs = _socket.socketpair()
    # The variables' names come in the hello, from tpuctl's one worker contract.
    env[HELLO["control_fd"][0]] = str(theirs.fileno())
    env[HELLO["reserved_fd"][0]] = str(held[0].fileno())
    for index, name in enumerate(HELLO.get("profiler_fd", [])):
        env[name] = str(held[index + 1].fileno())
    adopt()
    pid, problem = spawn(argv, env, tuple([theirs.fileno()] + [sock.fileno() for sock in held]))
    theirs.close()
    for sock in held:
        sock.close()
    if problem is not None:
        say("error", pack([("message", "cannot start " + argv[0] + ": " + problem)]))
        say("exit", 127)
        return 127
    say("pgid", pid)
    status = watch(pid, ours, pending)
    kill(pid, _signal.SIGKILL)
    kill_adopted()
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    say("exit", code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    for key, value in unpack(sys.argv[1]):
        HELLO.setdefault(key, []).append(value)
    NONCE = HELLO["nonce"][0]
    os._exit(run(hello()))
