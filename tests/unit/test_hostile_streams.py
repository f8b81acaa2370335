"""Streams from outside, read in bounded memory whatever they hold (issue 46): a worker's control channel and console,
an ssh session's streams and its agent, a remote command's output, the children tpuctl reads an answer from (doctor's
probe and its TensorFlow import, `devices`' TensorFlow worker, kubectl, py-spy and faulthandler's stacks).

The kinds: a line that never ends (no newline, ever), a line longer than any message, output without end before an
answer, an answer that is no agent's. Each is read under a memory cap smaller than what it sends, so a reader that held
it whole meets MemoryError (or its deadline), and each says what it dropped in one line.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins.cli_calls import invoke, memory_cap
from tests.standins.hostile_text import NASTY, leaks
from tpuctl.backends.ssh import session, wire
from tpuctl.cluster import worker_contract as contract
from tpuctl.cluster.tf_config import Task
from tpuctl.launch.console.logs import LINE_PIECE
from tpuctl.launch.process.plan import WorkerSpec
from tpuctl.safety import stack_dump

MiB = 1 << 20
CAP = 64 * MiB  # address space a reader may add: a fraction of what each hostile writer sends
ENDLESS = 160  # MiB a hostile writer sends with no newline


def _tool(folder: Path, name: str, code: str) -> Path:
    """An executable `name` in `folder` that runs `code` with this interpreter, whatever its arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!{sys.executable}\n{code}")
    path.chmod(0o755)
    return path


def _capped(size: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (size, size))


def _spew(stream: str, mib: int, then: str = "") -> str:
    """Python that writes `mib` MiB of 'x' with no newline to `stream` (an fd number or "1"), then `then`."""
    return f"import os\nfd = {stream}\nblock = b'x' * (1 << 20)\nfor _ in range({mib}):\n    os.write(fd, block)\nos.write(fd, {then.encode()!r})\n"


# --- a local worker's control channel and console ------------------------------------------------------------------


@pytest.fixture
def local_worker(tmp_path: Path) -> Iterator[object]:
    """Start a local worker running Python code (through LocalStarter, with its control channel and output pipe)."""
    from tpuctl.backends.local.processes import LocalStarter

    started = []

    def start(code: str) -> object:
        spec = WorkerSpec(Task("worker", 0), True, "localhost", None, (sys.executable, "-c", code))
        handle = LocalStarter(tmp_path).start(spec)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.signal(signal.SIGKILL)  # type: ignore[attr-defined]
        handle.close()  # type: ignore[attr-defined]
        handle.wait()  # type: ignore[attr-defined]


def test_a_control_line_without_end_is_dropped_as_it_comes_and_the_channel_read_on(local_worker) -> None:  # type: ignore[no-untyped-def]
    """The script can write to its control channel: 160 MiB with no newline is one None (the attempt's warning, once),
    held no further than the longest message; the largest stacks answer a reaper sends still comes through whole."""
    channel = f"int(os.environ[{contract.CONTROL_FD!r}])"
    largest = f"b'stacks ' + b'ab' * {stack_dump.STACKS_LIMIT} + b'\\n'"  # a dump as long as a reaper sends, in hex
    code = _spew(channel, ENDLESS, "\nready\n") + f"os.write(fd, {largest})\nos.write(fd, b'ended\\n')\n"
    handle = local_worker(code)
    with memory_cap(CAP):
        got = [None if m is None else (m[:9], len(m)) for m in handle.messages()]
    assert got == [None, ("ready", 5), ("stacks ab", 7 + 2 * stack_dump.STACKS_LIMIT), ("ended", 5)]


_WRITES_ON_ITS_CHANNEL = """import os, socket
for name in os.listdir("/proc/self/fd"):  # the control channel: the one Unix socket the worker holds
    try:
        kind = socket.socket(fileno=os.dup(int(name)))
    except OSError:
        continue
    if kind.family == socket.AF_UNIX:
        for _ in range(3):
            os.write(int(name), b"x" * (%d + 1) + b"\\n")
    kind.close()
print("trained")
"""


def test_a_launch_says_once_that_a_worker_sent_control_lines_longer_than_any_message(tmp_path: Path) -> None:
    """A real local launch whose script writes three over-long lines to its control channel: one warning line naming
    the worker, the rest dropped quietly, and the run goes on to its end."""
    from tests.conftest import run_tpuctl

    script = tmp_path / "train.py"
    script.write_text(_WRITES_ON_ITS_CHANNEL % stack_dump.MESSAGE_LIMIT)
    result = run_tpuctl("launch", str(script), "--strategy", "none", "--no-profiler-server", "--log-dir", str(tmp_path / "logs"), timeout=120)
    assert result.returncode == 0 and "trained" in result.stdout + result.stderr, result.stderr[-2000:]
    warnings = [line for line in result.stderr.splitlines() if "sent a control line longer than" in line]
    assert len(warnings) == 1 and "worker:0" in warnings[0] and str(stack_dump.MESSAGE_LIMIT) in warnings[0], result.stderr[-2000:]


def test_console_output_without_a_newline_comes_in_pieces(local_worker) -> None:  # type: ignore[no-untyped-def]
    """A worker that prints 160 MiB with no newline (a binary's bytes) is copied on in pieces of LINE_PIECE, none held whole."""
    handle = local_worker(_spew("1", ENDLESS, "\ndone\n"))
    pieces, total = 0, 0
    with memory_cap(CAP):
        while piece := handle.output.readline():
            assert len(piece) <= LINE_PIECE
            pieces, total = pieces + 1, total + len(piece)
            last = piece
    assert total == ENDLESS * MiB + 6 and last == b"done\n" and pieces > ENDLESS


def test_a_dump_longer_than_tpuctl_sends_is_cut_and_an_endless_py_spy_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reaper's side: faulthandler's answer (here a worker's SIGQUIT handler that writes 6 MiB) and a py-spy that
    prints without end are both cut to STACKS_LIMIT with a line that says so, so that the answer fits a control line."""
    monkeypatch.setenv("PATH", str(tmp_path / "none"))  # no py-spy: faulthandler's way
    monkeypatch.setattr(stack_dump, "ANSWER_S", 30.0)  # the cut is tested, not the wait: a loaded machine runs the handler late
    dumps, answers = os.pipe()
    dump = f"lambda *a: [os.write({answers}, b'  File x\\n' * 65536) for _ in range(12)]"  # 6.75 MiB, as faulthandler writes it
    worker = subprocess.Popen(
        [sys.executable, "-c", f"import os, signal, time\nsignal.signal(signal.SIGQUIT, {dump})\nprint(1, flush=True)\ntime.sleep(30)\n"],
        pass_fds=(answers,), stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        os.close(answers)
        assert worker.stdout is not None and worker.stdout.readline() == b"1\n"
        os.set_blocking(dumps, False)
        text = stack_dump.capture(worker.pid, dumps)
    finally:
        worker.kill()
        worker.wait()
        os.close(dumps)
    assert len(text) <= stack_dump.STACKS_LIMIT and text.endswith(stack_dump.CUT) and text.startswith(b"  File x\n")
    monkeypatch.setenv("PATH", str(_tool(tmp_path / "spy", "py-spy", _spew("1", 64)).parent))
    with memory_cap(CAP):
        text = stack_dump.capture(os.getpid(), -1)
    assert len(text) <= stack_dump.STACKS_LIMIT and text.endswith(stack_dump.CUT)


# --- an ssh session: the launcher's side, and the agent on the host ------------------------------------------------


NONCE = "n0nce"
_SESSION = """import os, sys
out, err = 1, 2
def say(line):
    os.write(err, ("{nonce} " + line + "\\n").encode())
say("msg ready")
{spew_out}
say("msg " + "s" * 3000)  # a short message
os.write(err, b"{nonce} msg ")
{spew_err}
say("msg after")
os.write(err, b"ssh: a line of ssh's own")
{spew_ssh}
say("exit 0")
"""


def test_a_session_that_sends_without_end_is_read_in_pieces_and_its_markers_bounded() -> None:
    """What a hostile or broken host sends: 160 MiB of output with no newline (shown in pieces), a marker line longer
    than any message (dropped as it comes, said as a dropped message), and a line of ssh's without end (in pieces),
    all read with the session's messages and exit status intact."""
    code = _SESSION.format(nonce=NONCE, spew_out=_spew("out", ENDLESS, "\nend\n"), spew_err=_spew("err", 24, "\n"), spew_ssh=_spew("err", 8, "\n"))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    spec = WorkerSpec(Task("worker", 0), True, "host", None, ("python",))
    handle = session.SshHandle(spec, session.Session("host", proc, NONCE, session.Hello(port=1)))
    lines = []
    try:
        with memory_cap(CAP):
            while piece := handle.output.readline():
                assert len(piece) <= LINE_PIECE
                lines.append(piece[:40])
    finally:
        proc.kill()
        proc.wait()
    assert b"end\n" in lines and b"ssh: a line of ssh's ownxxxxxxxxxxxxxxxx" in lines
    assert [None if m is None else m[:5] for m in handle.messages()] == ["ready", "sssss", None, "after"]
    assert handle.wait() == 0


def test_a_hello_that_is_no_agents_or_longer_than_any_is_this_hosts_error() -> None:
    """Before its hello a host may send anything: ssh's lines without end (kept as their last few, each cut), a hello
    longer than HELLO_LIMIT, or one not packed as an agent packs it: one error of that host's, never a traceback."""
    longest = 2 * session.HELLO_LIMIT  # the cap where a hello may be that long: held once, with room to spare
    for garbage, hello, said, cap in [
        (_spew("2", ENDLESS, "\n"), "hello zz", "its agent's hello line is not one tpuctl's agent writes", CAP),
        ("", "error \\u00ff", "its agent's error line is not one tpuctl's agent writes", CAP),
        ("", "hello " + "0" * 128, "its agent's hello line is not one tpuctl's agent writes", CAP),
        ("os.write(2, b'" + NONCE + " hello ')\n" + _spew("2", 2 * longest // MiB), "", "its agent's hello is longer than", longest),
    ]:
        code = garbage + (f"os.write(2, {(NONCE + ' ' + hello + chr(10)).encode()!r})\n" if hello else "")
        proc = subprocess.Popen([sys.executable, "-c", "import os\n" + code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            with memory_cap(cap):
                found, error, _, diagnostics = session.read_hello(proc, NONCE, time.monotonic() + 30)
        finally:
            proc.kill()
            proc.wait()
        assert found is None and error is not None and error.startswith(said), (hello, error)
        assert len(diagnostics) <= session.DIAGNOSTICS and all(len(line) <= session.DIAGNOSTIC_CHARS for line in diagnostics)


def test_the_agent_drops_a_workers_control_line_past_the_launchers_limit(tmp_path: Path) -> None:
    """On the host: a worker that writes 160 MiB with no newline to its control socket costs the agent no more than
    the hello's message_limit (its memory capped below what is sent), one `dropped` line, and its next messages."""
    hello = [("nonce", "N0"), ("cwd", str(tmp_path)), ("control_fd", contract.CONTROL_FD), ("reserved_fd", contract.RESERVED_FD)]
    hello.append(("message_limit", str(MiB)))
    channel = f"int(os.environ[{contract.CONTROL_FD!r}])"
    worker = _spew(channel, ENDLESS, "\nready\n") + "import time\ntime.sleep(0.3)\n"  # an agent relays until its worker ends
    job = wire.pack([("argv", sys.executable), ("argv", "-c"), ("argv", worker)])
    agent = subprocess.Popen(
        [sys.executable, "-S", "-c", session.AGENT_SOURCE, wire.pack(hello)], stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": os.environ["PATH"]}, preexec_fn=lambda: _capped(96 * MiB),
    )  # fmt: skip
    assert agent.stdin is not None and agent.stderr is not None
    timer = threading.Timer(60, agent.kill)  # the agent's end (its stdin open meanwhile: the launcher is there)
    timer.start()
    try:
        agent.stdin.write(job + "\n")
        agent.stdin.flush()
        said = [line.split()[1:] for line in iter(agent.stderr.readline, "") if not line.startswith("N0 hello")]
    finally:
        timer.cancel()
        agent.stdin.close()
        agent.wait()
    assert said[1:] == [["dropped"], ["msg", "ready"], ["exit", "0"]] and said[0][0] == "pgid", said


# --- a command run on every host: the output kept is its last OUTPUT_LIMIT bytes ----------------------------------


def test_a_remote_command_that_prints_without_end_keeps_its_last_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tpuctl ssh -- CMD`, doctor's probe, clean-ups: a host that prints 320 MiB is read to its end and only its
    last OUTPUT_LIMIT bytes are kept (the count of the rest said); the command is not taken for a failed connection."""
    from tpuctl.ssh import fanout
    from tpuctl.ssh.client_args import SshOptions

    fake_ssh = _tool(tmp_path / "bin", "ssh", "import os, sys\nos.execvp('sh', ['sh', '-c', sys.argv[-1]])\n")  # runs the remote command here
    monkeypatch.setenv("PATH", f"{fake_ssh.parent}:{os.environ['PATH']}")
    options = SshOptions(control_path=str(tmp_path / "c"), attempts=1)
    writer = _spew("1", 2 * ENDLESS, "\nlast line\n") + "raise SystemExit(255)\n"
    with memory_cap(ENDLESS * MiB):  # the thread run_everywhere starts takes some of it
        [result] = fanout.run_everywhere(["h"], [sys.executable, "-c", writer], options, timeout=60)
    assert (result.exit_code, result.error, result.attempts) == (255, None, 1)
    assert result.output.endswith("last line\n") and len(result.output) <= fanout.OUTPUT_LIMIT
    assert result.dropped > 2 * ENDLESS * MiB - fanout.OUTPUT_LIMIT


# --- children read for an answer: doctor's probe and its import, `devices`' TensorFlow worker, kubectl --------------


def test_a_probe_that_prints_without_end_before_its_answer_is_read_for_its_answer(tmp_path: Path) -> None:
    """A sitecustomize that prints 160 MiB before the doctor's probe answers: its answer still counts (the last
    MAX_ANSWER bytes are kept), the rest read and dropped."""
    from tpuctl.doctor.facts import MARK
    from tpuctl.doctor.local import Request, probe_here

    answer = MARK + json.dumps({"format": 1, "python": {"version": [3, 11, 7], "executable": "/x/python"}, "hostname": "h"})
    python = _tool(tmp_path, "python", _spew("1", ENDLESS, "\n" + answer + "\n"))
    with memory_cap(CAP):
        facts = probe_here(str(python), Request(import_tensorflow=False))
    assert facts.executable == "/x/python"


@pytest.mark.parametrize("kind", ["endless", "nested"])
def test_the_probes_tensorflow_import_is_read_in_bounded_memory(tmp_path: Path, kind: str) -> None:
    """The probe's import child: a `tensorflow` that prints 768 MiB as it loads (the probe's memory capped at 512 MiB:
    communicate() would keep it all), or an answer nested past json's depth, is a finding, never the probe's end."""
    from tpuctl.doctor import facts
    from tpuctl.doctor.local import PROBE

    package = tmp_path / "site" / "tensorflow"
    package.mkdir(parents=True)
    if kind == "endless":
        code = _spew("1", 768, "\n") + "__version__ = '2.21.0'\nclass config:\n    list_physical_devices = staticmethod(list)\n"
    else:
        code = "import os, sys\nsys.stdout.write('answer ' + '[' * 5000 + chr(10))\nsys.stdout.flush()\nos._exit(0)\n"
    (package / "__init__.py").write_text(code)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(package.parent), "TPUCTL_SYSFS_ROOT": str(tmp_path / "root")}
    argv = [sys.executable, str(PROBE), json.dumps({"import": True, "deadline": 60})]
    done = subprocess.run(argv, env=env, capture_output=True, stdin=subprocess.DEVNULL, timeout=120, preexec_fn=lambda: _capped(512 * MiB), check=False)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr[-800:]
    read = facts.parse(done.stdout.decode(), kind)
    expected = {"endless": ("ok", "2.21.0"), "nested": ("error", None)}[kind]
    assert (read.tf_import.get("status"), read.tf_import.get("version")) == expected, read.tf_import


def test_a_tensorflow_worker_that_prints_without_end_before_its_answer(tmp_path: Path) -> None:
    """`tpuctl devices`' worker (here an interpreter that prints 160 MiB first): its answer, its last line, is read;
    what came before is read and dropped."""
    from contextlib import nullcontext

    from tpuctl.devices.probe import tensorflow_devices

    answer = json.dumps({"devices": [{"name": "/device:CPU:0", "device_type": "CPU"}], "tensorflow": "2.21.0"})
    python = _tool(tmp_path, "python", _spew("1", ENDLESS, "\n" + answer + "\n"))
    with memory_cap(CAP):
        found = tensorflow_devices(str(python), None, 5.0, lambda what: nullcontext())
    assert [row["name"] for row in found["devices"]] == ["/device:CPU:0"]


def test_a_kubectl_that_prints_without_end_is_stopped_at_its_limit(tmp_path: Path) -> None:
    from tpuctl.backends.kubernetes.follow import KUBECTL_LIMIT, Kubectl
    from tpuctl.inputs.errors import TpuctlError

    kubectl = Kubectl.__new__(Kubectl)
    kubectl.binary, kubectl.namespace = str(_tool(tmp_path, "kubectl", _spew("1", 2 * (KUBECTL_LIMIT >> 20) + 16))), "ns"
    with memory_cap(3 * KUBECTL_LIMIT), pytest.raises(TpuctlError, match=f"kubectl get printed more than {KUBECTL_LIMIT} bytes"):
        kubectl.run("get", "pods")
    kubectl.binary = str(_tool(tmp_path / "nested", "kubectl", "print('[' * 5000)"))
    with pytest.raises(TpuctlError, match="not JSON"):
        kubectl.get_json("pods")


# --- doctor's output: nothing from a host reaches the terminal as a control sequence -------------------------------


def _nasty_facts() -> dict[str, object]:
    """A probe's answer whose every string, on every path the checks read, holds escape sequences of each kind."""
    dist = {"name": "tensorflow", "version": "2.16.1" + NASTY, "location": "/site" + NASTY, "requires": ["libtpu" + NASTY]}
    return {
        "format": 1,
        "hostname": "host" + NASTY,
        "python": {"version": [3, 11, 7], "executable": "/py" + NASTY, "implementation": "cpython", "prefix": "/p" + NASTY},
        "distributions": [dist, {**dist, "name": "keras", "version": NASTY}, {**dist, "name": "libtpu", "version": "0.0.1" + NASTY}],
        "tensorflow_package": "/site/tensorflow" + NASTY,
        "env": {name: NASTY for name in ("TPU_NAME", "PJRT_DEVICE", "CUDA_VISIBLE_DEVICES", "GOOGLE_APPLICATION_CREDENTIALS", "TPU_LIBRARY_PATH")},
        "on_gce": True,
        "pci": [{"address": "0000:00:04.0" + NASTY, "vendor": "0x1ae0", "device": "0x0062", "driver": NASTY}],
        "dev": {"accel": ["/dev/accel0" + NASTY], "vfio": []},
        "holders": {"held": [{"pid": 7, "command": "python " + NASTY, "devices": ["/dev/accel0" + NASTY]}], "unreadable": 0, "lockfile": True},
        "libtpu_files": ["/lib/libtpu.so" + NASTY],
        "ports": {"asked": 2, "bound": 0, "error": NASTY, "range": None},
        "credentials": {"env_file": "/k" + NASTY, "env_file_readable": False, "adc_file": None},
        "paths": {},
        "metadata": {"reachable": True, "attributes": {"accelerator-type": "v4-8" + NASTY, "tpu-env": NASTY, "runtime-version": NASTY}, "date": NASTY},
        "nvidia_smi": {"found": True, "error": NASTY},
        "import": {"status": "error", "message": NASTY, "stage": NASTY, "seconds": 1.0},
    }


def test_doctor_prints_nothing_a_host_said_as_a_control_sequence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fact the checks quote (versions, paths, names, env values, messages, the host's name) is shown with its
    control characters escaped, in the plain lines and in --json, the dry run's line too."""
    from tpuctl.doctor.facts import MARK

    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "user.toml"))
    monkeypatch.chdir(tmp_path)
    answer = (MARK + json.dumps(_nasty_facts())).encode()
    python = _tool(tmp_path / ("bin" + NASTY.replace("/", "|").replace("\x00", "")), "python", f"print({answer!r}.decode())\n")
    for args in (["doctor", "--python", str(python)], ["doctor", "--python", str(python), "--json"], ["doctor", "--python", str(python), "--dry-run"]):
        result = invoke(args)
        assert result.crash is None and "Traceback" not in result.err, result.explain(args)
        assert not leaks(result.out) and not leaks(result.err), (args, leaks(result.out), leaks(result.err), result.out[-800:])
        assert args[-1] in ("--dry-run", "--json") or "\\x1b" in result.out  # the escapes are shown, as escapes


# --- a claimed log folder's record, nested past json's depth -------------------------------------------------------


def test_a_log_folder_claimed_by_a_record_nested_past_jsons_depth_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --log-dir whose run.json is 4 KB of `[` (within the size read) is a folder that holds a launch: one line,
    never RecursionError's traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run.json").write_text("[" * 4000)
    args = ["launch", "train.py", "--strategy", "none", "--log-dir", "logs"]
    result = invoke(args)
    assert result.crash is None and result.one_line_error and "already holds a launch" in result.err, result.explain(args)


# --- a model dir's `checkpoint` state file that is no TensorFlow's -------------------------------------------------


def test_a_checkpoint_state_file_of_hundreds_of_megabytes_is_read_no_further_than_its_start(tmp_path: Path) -> None:
    """`tail` reads a model dir's `checkpoint` at every poll: one of 512 MiB (a stranger's, in a shared model dir; a
    sparse file here) is read no further than STATE_LIMIT, and the newest checkpoint its first line names is found."""
    from tpuctl.watch.sources import LocalSource
    from tpuctl.watch.tailer import Tailer

    state = tmp_path / "checkpoint"
    state.write_text('model_checkpoint_path: "ckpt-7"\nall_model_checkpoint_paths: "ckpt-7"\n')
    os.truncate(state, 512 * MiB)
    (tmp_path / "ckpt-7.index").write_bytes(b"")
    with memory_cap(CAP):
        found = Tailer(LocalSource(str(tmp_path))).poll(last=True)
    assert [checkpoint.step for checkpoint in found.checkpoints] == [7]


# --- folders nested past os.walk's recursion (it recurses a level a frame before Python 3.12) ---------------------


@pytest.fixture(scope="module")
def deep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder 1,200 deep (as a stranger's checkout or a runaway script leaves), a file at its bottom and one at its
    top; made and removed a level at a time through descriptors (the whole path passes PATH_MAX, and shutil.rmtree,
    which pytest's clean-up uses, recurses a level a frame too)."""
    top = tmp_path_factory.mktemp("deep")
    (top / "train.py").write_text("print(1)\n")
    levels = [os.open(top, os.O_RDONLY)]
    for _ in range(1200):
        os.mkdir("d", dir_fd=levels[-1])
        levels.append(os.open("d", os.O_RDONLY, dir_fd=levels[-1]))
    os.close(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=levels[-1]))
    try:
        yield top
    finally:
        os.unlink("bottom", dir_fd=levels[-1])
        while len(levels) > 1:
            os.close(levels.pop())
            os.rmdir("d", dir_fd=levels[-1])
        os.close(levels.pop())


def test_a_vertex_bundle_of_a_folder_nested_1200_deep_is_one_line(deep: Path) -> None:
    from tpuctl.backends.vertex import staging
    from tpuctl.inputs.errors import TpuctlError

    with pytest.raises(TpuctlError, match=f"nests folders deeper than {staging.MAX_DEPTH} levels"):
        staging.build(str(deep / "train.py"))


def test_the_agents_manifest_of_a_folder_nested_1200_deep_leaves_the_deep_files_to_be_sent(deep: Path) -> None:
    """The host's side of --sync without rsync: the shipped agent's hello lists what it can walk; a file deeper than
    wire.MAX_DEPTH is left out of it (--sync then sends it again), never a RecursionError that ends the agent."""
    hello = [("nonce", "N0"), ("cwd", str(deep)), ("control_fd", contract.CONTROL_FD), ("reserved_fd", contract.RESERVED_FD), ("sync", str(deep))]
    done = subprocess.run(
        [sys.executable, "-S", "-c", session.AGENT_SOURCE, wire.pack(hello)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=60, env={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-1500:]
    said = session.Hello.parse(done.stderr.splitlines()[0].split()[2])
    assert said.manifest is not None and list(said.manifest) == ["train.py"]


def test_tail_lists_a_model_dir_nested_1200_deep(deep: Path) -> None:
    """`tail` (and a launch's step watch) lists a model dir at every poll: one 1,200 deep is listed whole, the file at
    its bottom too, with no RecursionError."""
    from tpuctl.watch.sources import LocalSource

    listed = {info.path for info in LocalSource(str(deep)).list()}
    assert listed == {"train.py", "d/" * 1200 + "bottom"}
