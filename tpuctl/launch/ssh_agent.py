# The tpuctl agent: runs on a remote host as `python -S -c <this file's text> <hello>`.
#
# One agent per worker, in the worker's own ssh session. It is sent as source
# text, so the host needs only Python (tpuctl itself for the worker runtime,
# not for this). It imports only modules built into the interpreter, so that
# it starts in about 10 ms, and contains no backslash, so that it reads the
# same under any remote shell once quoted (unit tests check both). Comment
# lines are dropped before it is sent.
#
# Messages both ways are "packed": NUL-separated key, value, key, value...
# strings, UTF-8 (surrogateescape) and hex-encoded - one shell word, one line.
#
#   1. hello: create/enter the working directory, check the script, bind a free
#      port and hold it, report on stderr: NONCE hello <packed port, ip, ...>.
#   2. read one line on stdin: <packed argv..., env...>; EOF instead = exit, nothing started.
#   3. start the worker in its own session / process group, with the held port
#      (TPUCTL_RESERVED_FD) and a control socket (TPUCTL_CONTROL_FD) as a local
#      launch would, and report NONCE pgid N. Runtime messages ("ready") are
#      relayed as NONCE msg TEXT.
#   4. stdin lines INT / TERM / KILL signal the worker group; EOF (the
#      launcher or its connection is gone) kills the group at once.
#   5. when the worker exits, kill what is left of its group, report
#      NONCE exit STATUS (negative: killed by that signal), exit.
#
# The worker writes stdout and stderr to the agent's stdout (the session's
# data channel); the agent writes only its NONCE lines to stderr.
import os
import sys

import _signal
import _socket
import select

NL = chr(10)
NUL = chr(0)
HELLO = {}
NONCE = ""
SIGNALS = {"INT": _signal.SIGINT, "TERM": _signal.SIGTERM, "KILL": _signal.SIGKILL}


def pack(pairs):
    return NUL.join(k + NUL + v for k, v in pairs).encode("utf-8", "surrogateescape").hex()


def unpack(text):
    words = bytes.fromhex(text.strip()).decode("utf-8", "surrogateescape").split(NUL)
    return list(zip(words[0::2], words[1::2]))


def say(*words):
    line = " ".join([NONCE] + [str(word) for word in words]) + NL
    try:
        os.write(2, line.encode("utf-8", "replace"))
    except OSError:
        pass


def fail(problem):
    say("error", pack([("message", problem)]))
    os._exit(3)


def which(name):
    for folder in os.environ.get("PATH", "").split(":"):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def manifest(folder, exclude):
    found = []
    for top, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in exclude]
        for name in files:
            path = os.path.join(top, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            found.append(("file", os.path.relpath(path, folder)))
            found.append(("stat", str(info.st_size) + " " + str(int(info.st_mtime))))
    return found


def hold_port():
    for family, anywhere in ((_socket.AF_INET, "0.0.0.0"), (_socket.AF_INET6, "::")):
        try:
            sock = _socket.socket(family, _socket.SOCK_STREAM)
            sock.bind((anywhere, 0))
            return sock
        except OSError:
            continue
    fail("cannot bind a free TCP port")


def hello():
    for folder in HELLO.get("mkdir", []):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as err:
            fail("cannot create " + folder + ": " + str(err.strerror))
    cwd = HELLO["cwd"][0]
    try:
        os.chdir(cwd)
    except OSError as err:
        fail("cannot use working directory " + cwd + ": " + str(err.strerror))
    for script in HELLO.get("script", []):
        if not os.path.isfile(script):
            fail("script not found: " + os.path.join(os.getcwd(), script))
    held = hold_port()
    words = os.environ.get("SSH_CONNECTION", "").split()
    rsync = which("rsync") is not None
    report = [
        ("port", str(held.getsockname()[1])),
        ("ip", words[2] if len(words) == 4 else ""),
        ("hostname", _socket.gethostname()),
        ("rsync", "1" if rsync else ""),
    ]
    for folder in HELLO.get("sync", []):
        if not HELLO.get("local_rsync", [""])[0] or not rsync:
            report.append(("manifest", folder))
            report += manifest(folder, HELLO.get("exclude", [])) if os.path.isdir(folder) else []
    say("hello", pack(report))
    return held


def read_line(pending):
    while NL.encode() not in pending:
        chunk = os.read(0, 65536)
        if not chunk:
            return None, b""
        pending += chunk
    line, rest = pending.split(NL.encode(), 1)
    return line, rest


def spawn(argv, env, keep):
    # fork and exec by hand (no subprocess module: it costs more to import than all the rest)
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


def run(held):
    line, pending = read_line(b"")
    if not line or not line.strip():
        return 0
    argv, env = [], dict(os.environ)
    for key, value in unpack(line.decode()):
        if key == "argv":
            argv.append(value)
        elif key == "env":
            name, _, text = value.partition("=")
            env[name] = text
    ours, theirs = _socket.socketpair()
    env["TPUCTL_CONTROL_FD"] = str(theirs.fileno())
    env["TPUCTL_RESERVED_FD"] = str(held.fileno())
    pid, problem = spawn(argv, env, (theirs.fileno(), held.fileno()))
    theirs.close()
    held.close()
    if problem is not None:
        say("error", pack([("message", "cannot start " + argv[0] + ": " + problem)]))
        say("exit", 127)
        return 127
    say("pgid", pid)

    def kill(sig):
        try:
            os.killpg(pid, sig)
        except OSError:
            pass

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
    messages = b""
    give_up = None
    for raw in pending.split(NL.encode()):
        if raw.strip() in (b"INT", b"TERM", b"KILL"):
            kill(SIGNALS[raw.strip().decode()])
    pending = pending.rpartition(NL.encode())[2]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if give_up is not None and give_up <= 0:
            os._exit(255)
        timeout = 100 if pidfd is None or give_up is not None else None
        for fd, _ in poller.poll(timeout):
            if fd == 0:
                chunk = os.read(0, 65536)
                if not chunk:
                    # The launcher or its connection is gone: nobody may outlive it.
                    kill(_signal.SIGKILL)
                    poller.unregister(0)
                    give_up = 20
                    continue
                pending += chunk
                while NL.encode() in pending:
                    word, pending = pending.split(NL.encode(), 1)
                    sig = SIGNALS.get(word.strip().decode("ascii", "replace"))
                    if sig is not None:
                        kill(sig)
            elif fd == ours.fileno():
                chunk = os.read(fd, 4096)
                if not chunk:
                    poller.unregister(fd)
                    continue
                messages += chunk
                while NL.encode() in messages:
                    message, messages = messages.split(NL.encode(), 1)
                    say("msg", message.decode("utf-8", "replace").strip())
        if give_up is not None:
            give_up -= 1
    kill(_signal.SIGKILL)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    say("exit", code)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    for key, value in unpack(sys.argv[1]):
        HELLO.setdefault(key, []).append(value)
    NONCE = HELLO["nonce"][0]
    os._exit(run(hello()))
