"""The ssh backend's pure parts: command lines, quoting, placement, remote paths, CLI checks.

No connection is made here (tests/integration/test_launch_ssh.py does that with real sshd).
"""

from __future__ import annotations

import ast
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_tpuctl
from tests.standins.cli_calls import in_process
from tpuctl.backends.ssh import session, sync, wire
from tpuctl.backends.ssh.placement import RemotePaths, place
from tpuctl.cloud.nodes.run_nodes import label_value
from tpuctl.cluster.hosts import HostEntry
from tpuctl.inputs.errors import TpuctlError
from tpuctl.ssh import client_args as ssh_options
from tpuctl.ssh import remote_source
from tpuctl.ssh import shipment as runtime_files
from tpuctl.ssh.client_args import SshOptions, remote_command
from tpuctl.ssh.profile import SshHosts

EXAMPLE = str(ROOT / "examples" / "train_keras.py")
_ARGS = st.lists(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\0"), max_size=12), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(_ARGS)
def test_remote_command_is_one_shell_line_that_gives_back_the_argv(argv: list[str]) -> None:
    """What sshd hands to the login shell (`sh -c LINE`) runs exactly this argv: coreutils' printf (the line execs it)
    gives back each word it received, byte for byte."""
    line = remote_command(["printf", "%s\\0", *argv])
    done = subprocess.run(["sh", "-c", line], capture_output=True, check=True)
    assert done.stdout.decode().split("\0")[:-1] == argv


@pytest.mark.parametrize("source", [session.AGENT_SOURCE, remote_source.install_source()], ids=["agent", "installer"])
def test_agent_source_ships_without_comments_or_backslashes(source: str) -> None:
    assert "\\" not in source and "\\" not in sync.UNTAR_SOURCE
    assert not any(line.lstrip().startswith("#") for line in source.splitlines())
    compile(source, "<agent>", "exec")
    # A host's `python` may be old: no f-strings, variable annotations or walrus (Python's own check).
    ast.parse(source, feature_version=(3, 5))
    # The agent is sent on every worker's command line (the runtime cache's check included);
    # the installer only to a host whose cache lacks the runtime. A budget, not a limit of ssh's (one argument may
    # be 128 KiB): 14000 since the agent adopts orphans (issue 29); 14800 since a host's first agent runs the
    # launch's preflight checks (issue 25: 782 characters); 15000 since it drops a worker's over-long control lines and
    # walks no deeper than wire.MAX_DEPTH (issue 46: ~420 characters); 15100 since a JAX run's agents look for jax
    # instead of TensorFlow (issue 49: ~75 characters).
    assert len(source) < 15100


# Runs the shipped agent source as the host would, minus its main: each stdin line is a packed
# request (what, arg), each stdout line the packed answer of the shipped functions.
_SHIPPED_PROBE = """import sys
code = open(sys.argv[1]).read()
shipped = {"__name__": "shipped"}
exec(code, shipped)
pack, unpack = shipped["pack"], shipped["unpack"]
for line in sys.stdin:
    [(what, arg)] = unpack(line)
    if what == "repack":
        print(pack(unpack(arg)))
    else:
        print(pack(shipped["manifest_pairs"](shipped["manifest"](arg, ["__pycache__", ".git"]))))
"""


def _sync_folder(root: Path) -> Path:
    folder = root / "src"
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / "__pycache__").mkdir()
    (folder / ".git").mkdir()
    (folder / "train.py").write_text("print(1)\n")
    (folder / "sub" / "ünï cødé.txt").write_bytes(b"x" * 3000)
    (folder / "sub" / "deeper" / "empty").touch()
    (folder / "__pycache__" / "train.pyc").write_bytes(b"skipped")
    (folder / ".git" / "HEAD").write_text("skipped\n")
    os.mkfifo(folder / "a-fifo")  # not a regular file: left out on both ends
    (folder / "link").symlink_to(folder / "train.py")
    (folder / "dangling").symlink_to(folder / "missing")
    os.utime(folder / "train.py", (1_700_000_000.75, 1_700_000_000.75))
    return folder


def test_the_shipped_agent_packs_and_lists_files_exactly_as_the_launcher_reads_them(tmp_path: Path) -> None:
    """wire.py is the one copy: run as the host runs it (`python -S`, no tpuctl importable), its
    pack/unpack/manifest give back what the launcher's own import of wire.py gives."""
    shipped = tmp_path / "agent.py"
    shipped.write_text(session.AGENT_SOURCE)
    folder = _sync_folder(tmp_path)
    messages = [
        [("argv", "it's ü"), ("env", "A=b=c"), ("", ""), ("raw", "\udcff bytes")],
        [("key", "x" * 5000)],
        [],
    ]
    requests = [wire.pack([("repack", wire.pack(pairs))]) for pairs in messages] + [wire.pack([("manifest", str(folder))])]
    done = subprocess.run(
        [sys.executable, "-S", "-c", _SHIPPED_PROBE, str(shipped)],
        input="\n".join(requests) + "\n",
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
    )
    *repacked, files = done.stdout.splitlines()
    assert repacked == [wire.pack(pairs) for pairs in messages]
    assert [wire.unpack(line) for line in repacked] == messages
    expected = wire.manifest(str(folder), sync.SYNC_EXCLUDES)
    assert sorted(expected) == ["link", "sub/deeper/empty", "sub/ünï cødé.txt", "train.py"]
    assert expected["train.py"] == (9, 1_700_000_000)
    assert wire.read_manifest(wire.unpack(files)) == expected


def test_an_agent_says_hello_with_the_manifest_the_launcher_compares(tmp_path: Path) -> None:
    """The whole shipped agent, run without ssh: its hello parses to the launcher's own manifest of the folder."""
    folder = _sync_folder(tmp_path)
    hello = [("nonce", "N0"), ("cwd", str(tmp_path)), ("sync", str(folder)), ("local_rsync", "")]
    hello += [("exclude", name) for name in sync.SYNC_EXCLUDES]
    done = subprocess.run(
        [sys.executable, "-S", "-c", session.AGENT_SOURCE, wire.pack(hello)],
        stdin=subprocess.DEVNULL,  # no job: the agent leaves after its hello
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0, done.stderr
    nonce, kind, packed = done.stderr.split()
    assert (nonce, kind) == ("N0", "hello")
    said = session.Hello.parse(packed)
    assert said.port > 0 and said.manifest == wire.manifest(str(folder), sync.SYNC_EXCLUDES)


_PRINT_HELD = """import os, socket
for name in ("TPUCTL_RESERVED_FD", "TPUCTL_PROFILER_FD"):
    print(socket.socket(fileno=int(os.environ[name])).getsockname()[1])
"""


def test_an_agent_asked_for_a_profiler_port_holds_it_for_the_worker(tmp_path: Path) -> None:
    """A second held port, reported as `profiler` and handed to the worker as PROFILER_FD, bound until then."""
    hello = [("nonce", "N0"), ("cwd", str(tmp_path)), ("control_fd", "TPUCTL_CONTROL_FD"), ("reserved_fd", "TPUCTL_RESERVED_FD")]
    hello.append(("profiler_fd", "TPUCTL_PROFILER_FD"))
    job = wire.pack([("argv", sys.executable), ("argv", "-c"), ("argv", _PRINT_HELD)])
    done = subprocess.run(
        [sys.executable, "-S", "-c", session.AGENT_SOURCE, wire.pack(hello)],
        input=job + "\n",
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0, done.stderr
    said = session.Hello.parse(done.stderr.splitlines()[0].split()[2])
    assert said.port > 0 and said.profiler_port > 0 and said.port != said.profiler_port
    assert done.stdout.split() == [str(said.port), str(said.profiler_port)]


def test_a_hello_without_a_profiler_port_says_0() -> None:
    assert session.Hello.parse(wire.pack([("port", "4000"), ("ip", "10.0.0.2")])).profiler_port == 0
    assert session.Hello.parse(wire.pack([("profiler", "4001"), ("port", "4000")])) == session.Hello(port=4000, profiler_port=4001)


def test_a_fetched_session_keeps_only_the_named_plain_files(tmp_path: Path) -> None:
    """What a host's tar sends back is written only where the session's worker files go (ssh/profile.py)."""
    archive = tmp_path / "session.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (("h_1.xplane.pb", b"one"), ("../h_2.xplane.pb", b"escape"), ("other.pb", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("h_3.xplane.pb")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    into = tmp_path / "into"
    into.mkdir()
    names = dict.fromkeys(["h_1.xplane.pb", "../h_2.xplane.pb", "h_3.xplane.pb"], "worker:0")
    with archive.open("rb") as stream:
        SshHosts._untar(stream, names, into)
    assert [p.name for p in tmp_path.rglob("*") if p.is_file() and p != archive] == ["h_1.xplane.pb"]
    assert (into / "h_1.xplane.pb").read_bytes() == b"one"


def test_user_options_come_first_because_ssh_keeps_the_first_value() -> None:
    options = SshOptions(user="me", key="/k", options=("ControlPersist=no", "ProxyJump=bastion"), config="/cfg", control_path="/c/%C")
    argv = options.command(HostEntry("h", 2200), ["echo", "a b"])
    assert argv[:7] == ["ssh", "-F", "/cfg", "-o", "ControlPersist=no", "-o", "ProxyJump=bastion"]
    assert argv.index("ControlPersist=no") < argv.index(f"ControlPersist={ssh_options.CONTROL_PERSIST}")
    for wanted in ("BatchMode=yes", "ControlMaster=auto", "ControlPath=/c/%C"):
        assert wanted in argv
    assert argv[argv.index("-i") + 1] == "/k" and argv[argv.index("-l") + 1] == "me"
    assert argv[-5:] == ["-p", "2200", "--", "h", "exec echo 'a b'"]


def test_control_dir_is_private(monkeypatch: pytest.MonkeyPatch) -> None:
    short = Path(tempfile.mkdtemp(prefix="c", dir="/tmp"))  # pytest's tmp_path is too long for a socket path
    try:
        monkeypatch.setattr(ssh_options.tempfile, "gettempdir", lambda: str(short))
        folder = ssh_options.control_dir()
        assert folder == short / f"tpuctl-{os.getuid()}" / "ssh"
        assert folder.stat().st_mode & 0o077 == 0
        folder.chmod(0o777)
        with pytest.raises(TpuctlError, match="must be a private directory"):
            ssh_options.control_dir()
    finally:
        shutil.rmtree(short)


def test_long_tmpdir_falls_back_to_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssh_options.tempfile, "gettempdir", lambda: "/tmp/" + "x" * 80)
    assert str(ssh_options.control_dir()).startswith("/tmp/tpuctl-")


def test_place_fills_slots_in_order() -> None:
    entries = [HostEntry("a", None, 2), HostEntry("b"), HostEntry("c", None, 3)]
    assert place(entries, 4) == ["a", "a", "b", "c"]
    assert place(entries, 6) == ["a", "a", "b", "c", "c", "c"]
    with pytest.raises(TpuctlError, match="7 process"):
        place(entries, 7)


@pytest.mark.parametrize(
    ("script", "remote_dir", "expected"),
    [
        ("train.py", None, RemotePaths("/home/u/proj", "train.py", "/home/u/proj", "/home/u/proj")),
        ("src/train.py", None, RemotePaths("/home/u/proj", "src/train.py", "/home/u/proj/src", "/home/u/proj/src")),
        ("/home/u/proj/src/t.py", None, RemotePaths("/home/u/proj", "/home/u/proj/src/t.py", "/home/u/proj/src", "/home/u/proj/src")),
        ("src/train.py", "/srv/p", RemotePaths("/srv/p", "src/train.py", "/home/u/proj/src", "/srv/p/src")),
        ("/home/u/proj/src/t.py", "/srv/p", RemotePaths("/srv/p", "src/t.py", "/home/u/proj/src", "/srv/p/src")),
        ("/opt/x/t.py", None, RemotePaths("/home/u/proj", "/opt/x/t.py", "/opt/x", "/opt/x")),
        ("../x/t.py", "/srv/p", RemotePaths("/srv/p", "t.py", "/home/u/x", "/srv/p")),
        ("t.py", "work", RemotePaths("work", "t.py", "/home/u/proj", "work")),
    ],
)
def test_remote_paths(script: str, remote_dir: str | None, expected: RemotePaths) -> None:
    assert RemotePaths.resolve(script, remote_dir, "/home/u/proj") == expected


def test_model_dir_moves_with_the_working_directory() -> None:
    paths = RemotePaths.resolve("t.py", "/srv/p", "/home/u/proj")
    assert paths.remote_path("/home/u/proj/runs/m", "/home/u/proj") == "/srv/p/runs/m"
    assert paths.remote_path("/data/m", "/home/u/proj") == "/data/m"
    # A relative working directory is under the remote home, and the workers run in it: they get the path from there.
    home_relative = RemotePaths.resolve("t.py", "tpuctl/work/proj-1a2b3c4d", "/home/u/proj")
    assert home_relative.remote_path("/home/u/proj/runs/m", "/home/u/proj") == "runs/m" and home_relative.where == "~/tpuctl/work/proj-1a2b3c4d"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sync"], "--sync is for launches over ssh: add --hosts, --hostfile, --tpu or --new-tpu"),
        (["--remote-dir", "/x"], "--remote-dir is for launches over ssh"),
        (["--fanout", "4"], "--fanout is for launches over ssh"),
        (["--backend", "ssh"], "--backend ssh needs --hosts or --hostfile"),
        (["--hosts", "a", "--backend", "local"], "--hosts runs workers over ssh, not with --backend local"),
        (["--hosts", "a", "--hostfile", "f"], "give one of --hosts, --hostfile, --tpu"),
        (["--hosts", "a:0"], "--hosts entry 1 'a:0': slots '0' is not a positive integer"),
        (["--hosts", "a,b", "--workers", "3"], "3 process(es) need 3 slots, but --hosts gives 2"),
        (["--hosts", "a,b", "--strategy", "parameter-server", "--ps", "1"], "too few for a chief, 1 ps and a worker"),
        (["--hosts", "a", "--ssh-option", "NoValue"], "--ssh-option 'NoValue' is not NAME=VALUE"),
        (["--hosts", "a", "--ssh-option", "Bogus=1"], "ssh rejects the options: command-line: line 0: Bad configuration option: bogus"),
        (["--hosts", "a", "--ssh-key", "/no/such/key"], "'--ssh-key': File '/no/such/key' does not exist"),
        (["--new-tpu", "v4-16", "--tpu", "pod"], "give one of --hosts, --hostfile, --tpu, --new-tpu"),
        (["--new-tpu", "v4-16", "--hosts", "a"], "give one of --hosts, --hostfile, --tpu, --new-tpu"),
        (["--new-tpu", "v4-16", "--backend", "local"], "--new-tpu runs workers over ssh, not with --backend local"),
        (["--new-tpu", "v4-16", "--backend", "vertex"], "--new-tpu runs workers over ssh, not with --backend vertex"),
        (["--new-tpu", "v4-16,v4-8", "--zone", "us-central2-b"], "--new-tpu types must have as many hosts as each other"),
        (["--new-tpu", "v9-8"], "unknown TPU generation 'v9'"),
        (["--hosts", "a", "--keep"], "--zones, --capacity, --recovery, --keep and --keep-on-failure are for --new-tpu TYPE"),
        (["--tpu", "pod", "--zones", "all"], "--zones, --capacity, --recovery, --keep and --keep-on-failure are for --new-tpu TYPE"),
        (["--hosts", "a", "--recovery", "elsewhere-first"], "--zones, --capacity, --recovery, --keep and --keep-on-failure are for --new-tpu TYPE"),
        (["--new-tpu", "v4-16", "--zone", "us-central2-b", "--recovery", "nearest"], "recovery 'nearest' from --recovery is not valid (same-zone-first or"),
        (["--keep-on-failure"], "--keep-on-failure is for launches over ssh: add --hosts, --hostfile, --tpu or --new-tpu"),
    ],
)
def test_bad_ssh_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = in_process("launch", EXAMPLE, *args, "--dry-run")
    assert result.code == 2, result.err
    assert message in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


def test_a_launch_with_options_ssh_rejects_is_a_usage_error_not_an_unreachable_host(tmp_path: Path) -> None:
    # A real launch checks the options only once a connection failed; it must still blame them.
    result = run_tpuctl("launch", EXAMPLE, "--hosts", "a.invalid", "--ssh-option", "Bogus=1", "--log-dir", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ssh rejects the options: ")
    assert "cannot reach" not in result.stderr


def test_hostfile_with_a_port_is_refused(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=2\nb:22\n")
    result = in_process("launch", EXAMPLE, "--hostfile", str(hostfile), "--dry-run")
    assert result.code == 2
    assert f"Error: {hostfile} line 2: 'b:22' has a port" in result.err


def test_dry_run_over_ssh_places_workers_without_connecting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two GPU hosts\nnode-a.invalid slots=2\nnode-b.invalid slots=2\n")
    monkeypatch.chdir(tmp_path)
    result = in_process("launch", EXAMPLE, "--hostfile", str(hostfile), "--dry-run", "--json", "--remote-dir", "/srv/p")
    assert result.code == 0, result.err
    plan = json.loads(result.out)
    assert [w["host"] for w in plan["workers"]] == ["node-a.invalid"] * 2 + ["node-b.invalid"] * 2
    config = json.loads(plan["workers"][3]["env"]["TF_CONFIG"])
    assert config["cluster"]["worker"] == ["node-a.invalid:<port>"] * 2 + ["node-b.invalid:<port>"] * 2
    assert config["task"] == {"type": "worker", "index": 3}
    assert plan["workers"][0]["argv"][3] == "train_keras.py"  # outside the working directory: lands in --remote-dir
    # The runtime every host gets (or has from an earlier launch), named by its digest.
    shipment = runtime_files.shipment()
    assert plan["runtime"]["digest"] == shipment.digest and "tpuctl/runtime/bootstrap.py" in plan["runtime"]["files"]
    assert plan["runtime"]["folder"] == f"~/.cache/tpuctl/runtime/{shipment.digest}"
    text = in_process("launch", EXAMPLE, "--hostfile", str(hostfile), "--dry-run").out
    assert f"from ~/.cache/tpuctl/runtime/{shipment.digest[:12]}… on each host (shipped where missing)" in text


def test_explicit_workers_use_the_first_slots(tmp_path: Path) -> None:
    result = in_process("launch", EXAMPLE, "--hosts", "a:2,b:2", "--workers", "3", "--dry-run", "--json")
    assert result.code == 0, result.err
    assert [w["host"] for w in json.loads(result.out)["workers"]] == ["a", "a", "b"]


def test_a_remote_dry_run_shows_the_remote_side_and_warns_about_laptop_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30: the ssh command per host, the sync, the remote folder and interpreter; this machine's paths named."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node-a.invalid\nnode-b.invalid\n")
    monkeypatch.chdir(tmp_path)
    plain = in_process("launch", EXAMPLE, "--hostfile", str(hostfile), "--dry-run", "--json")
    assert plain.code == 0, plain.err
    remote = json.loads(plain.out)["remote"]
    assert remote["sync"] is None and remote["python"] == sys.executable
    assert set(remote["ssh"]) == {"node-a.invalid", "node-b.invalid"}
    assert shlex.split(remote["ssh"]["node-b.invalid"])[-2:][0] == "node-b.invalid"
    assert any("this machine's Python" in w for w in remote["warnings"]) and any("--sync" in w for w in remote["warnings"])
    synced = in_process("launch", EXAMPLE, "--hostfile", str(hostfile), "--sync", "--remote-dir", "/srv/train", "--python", "python3", "--dry-run")
    assert synced.code == 0, synced.err
    assert "remote: workers run in /srv/train with python3" in synced.out
    assert f"sync: {os.path.dirname(os.path.abspath(EXAMPLE))}/ -> each host's /srv/train/, the files chosen by" in synced.out
    assert "sync: with: rsync -a " in synced.out
    assert "ssh to node-a.invalid: ssh " in synced.out and "warning:" not in synced.out


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [(["--capacity", "spot,flex-start"], {}, "--capacity"), ([], {"TPUCTL_CAPACITY": "flex-start"}, "the capacity setting from TPUCTL_CAPACITY")],
)
def test_new_tpu_refuses_flex_start_in_one_line_that_offers_what_works(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], named: str
) -> None:
    """A flex-start slice is deleted by the service when its duration ends and a run's recovery cannot make it again:
    refused, naming where flex-start came from, pointing to a flex-start VM of the user's own, never to --capacity
    flex-start; docs/managed-runs.md shows the same line and offers no flex-start for --new-tpu."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = in_process("launch", EXAMPLE, "--new-tpu", "v5litepod-8", "--zone", "us-west4-a", *args, "--dry-run")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    line = result.err.strip()
    why = "the service deletes a flex-start slice when its run duration ends, and the run's recovery cannot recreate it within the run"
    assert line.startswith(f"Error: --new-tpu cannot use flex-start ({named}): {why} (")
    assert "`tpuctl create NAME --flex-start --max-run-duration D`, then `tpuctl launch --tpu NAME ...`" in line and "--capacity flex-start" not in line
    guide = (ROOT / "docs" / "managed-runs.md").read_text()
    assert line.replace(f"({named})", "(--capacity)") in guide
    (row,) = [row for row in guide.splitlines() if row.startswith("| `--capacity KIND")]
    assert "flex-start" not in row.split("|")[2].split("(")[0], row


def test_a_dry_run_of_new_tpu_plans_its_hosts_names_its_vm_and_creates_nothing() -> None:
    """The VM's hosts are placeholders (one per host of the type) until it exists; the dry run reads no API."""
    result = run_tpuctl("launch", EXAMPLE, "--new-tpu", "v4-16", "--zone", "us-central2-b", "--project", "my-proj", "--keep-on-failure",
                        "--python", "python3", "--dry-run", "--json", env={**os.environ, "TPUCTL_TPU_ENDPOINT": "http://127.0.0.1:9"})  # fmt: skip
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert [w["host"] for w in shown["workers"]] == ["new-tpu-host-0", "new-tpu-host-1"]
    made = shown["remote"]["new_tpu"]
    assert made["name"] == label_value(shown["run_id"]) and made["types"] == ["v4-16"] and made["zones"] == "us-central2-b"
    assert made["at_end"] == "kept if the run fails, deleted otherwise" and made["capacity"] == ["on-demand"]
    assert made["recovery"] == "elsewhere-first for spot and preemptible, same-zone-first otherwise"
