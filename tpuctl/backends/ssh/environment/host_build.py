# One resolution on the first host, the environment built from the lock on each host, --setup run in it, the
# lock's wheels handed on: the fourth and last part of the host's program, sent after cache.py's, host_env.py's and
# host_copy.py's text (environment/remote.py), written as they are (standard library, old Python 3 syntax, no backslash, no multi-line
# string).
#
# A host that builds installs the lock's wheels, by exact pin and hash, with no index: `pip install --no-index
# --find-links WHEELS --require-hashes`. The wheels come from this host's own folder (the host that resolved),
# from the launcher on stdin (a tar after the header), or from the run's bucket (the JSON API; on a VM with the
# metadata server's token, against an emulator with none). Each file is checked against the lock before use. The
# other hosts of the same Python get the built environment itself (host_copy.py) where the launcher carries it.

import os
import sys

TYPE_CHECKING = False  # typing costs the start; mypy treats this name as True
if TYPE_CHECKING:
    from typing import Any

    # At run time these come from cache.py's, host_env.py's and host_copy.py's text, sent ahead of this file's.
    from tpuctl.backends.ssh.environment.host_copy import ROOM_EXTRA, copy, hex_name, pack_env, place, relocate, room
    from tpuctl.backends.ssh.environment.host_env import (
        CHUNK,
        MAX_WHEEL_BYTES,
        Failed,
        canonical,
        deadline_left,
        env_python,
        fail,
        fetch_pins,
        keep_wheels,
        lock_digest,
        make_venv,
        out_of_room,
        own_folder,
        pip_env,
        pip_failure,
        probe,
        read_header,
        ready_lock,
        remove,
        reply,
        run,
        sweep,
        tail,
        tpuctl_cache,
        wait,
        wheels_ready,
        write_atomic,
    )

ROOM_FACTOR = 3  # an installed wheel takes about thrice its size on disk


# ---- one resolution -----------------------------------------------------------------------------


def resolve(header: "dict[str, Any]", deadline: float) -> None:
    import json

    index_url = str(header.get("index_url") or "")
    envs = own_folder("envs")
    sweep(envs)
    scratch = os.path.join(envs, ".new-" + os.urandom(8).hex())
    os.mkdir(scratch, 0o700)
    log = os.path.join(scratch, "resolve.log")
    try:
        python = make_venv(os.path.join(scratch, "venv"), log, deadline)
        wanted = os.path.join(scratch, "requirements.txt")
        with open(wanted, "w") as handle:
            handle.write(str(header.get("requirements", "")))
        report = os.path.join(scratch, "report.json")
        argv = [python, "-m", "pip", "install", "--dry-run", "--only-binary=:all:", "--report", report, "-r", wanted]
        status = run(argv, log, deadline, pip_env(index_url))
        if status != 0 and ("no such option: --report" in tail(log) or "no such option: --dry-run" in tail(log)):
            # The host's pip is older than pip's report and dry run (both 22.2; Ubuntu 22.04's is 22.0.2, which names
            # --dry-run as the option it lacks): a newer pip into the scratch venv alone, from the same index, then the
            # dry run again. The environments themselves use the host's pip.
            if run([python, "-m", "pip", "install", "pip>=22.2"], log, deadline, pip_env(index_url)) != 0:
                fail(*pip_failure(log), log=tail(log))
            status = run(argv, log, deadline, pip_env(index_url))
        if status != 0:
            fail(*pip_failure(log), log=tail(log))
        with open(report) as handle:
            chosen = json.load(handle).get("install", [])
        lock, needs = download(python, chosen, os.path.join(scratch, "wheels"), log, deadline, index_url)
        keep_wheels(os.path.join(scratch, "wheels"), lock)
        reply({"lock": lock, "needs": needs, "log": tail(log)})
    finally:
        remove(scratch)


# The report's packages downloaded, exactly those files (hash-pinned where the index gave hashes), and the lock of
# what came; `needs`: which of them each one requires, by name, to say what pulled a package in. Each file straight
# from the URL the report names where it can be (fetch_direct), the rest by pip download.
def download(
    python: str, chosen: "list[dict[str, Any]]", folder: str, log: str, deadline: float, index_url: str
) -> "tuple[list[dict[str, Any]], dict[str, list[str]]]":
    expected = {}  # type: dict[tuple[str, str], str]
    urls = {}  # type: dict[tuple[str, str], str]
    needs = {}
    for item in chosen:
        meta = item.get("metadata", {})
        name, version = canonical(str(meta.get("name", ""))), str(meta.get("version", ""))
        info = item.get("download_info", {}).get("archive_info", {})
        given = str(info.get("hash", ""))
        expected[(name, version)] = str(info.get("hashes", {}).get("sha256") or (given[7:] if given.startswith("sha256=") else ""))
        urls[(name, version)] = str(item.get("download_info", {}).get("url", ""))
        needs[name] = [canonical(requirement_name(text)) for text in meta.get("requires_dist", []) or [] if "extra ==" not in text]
    lock = fetch_direct(urls, expected, folder, log, deadline, index_url)
    rest = dict((key, digest) for key, digest in expected.items() if key not in set((item["name"], item["version"]) for item in lock))
    by_pip = folder + "-pip"
    for item in fetch_pins(python, rest, by_pip, log, deadline, index_url):
        os.rename(os.path.join(by_pip, item["file"]), os.path.join(folder, item["file"]))
        lock.append(item)
    return lock, needs


FETCHES = 4  # files fetched at once: a few connections to one index, as a browser opens


# The files pip's report chose, fetched from the URLs it names, a few at once, each checked against the report's
# SHA-256 as it comes and bounded in size and time: what a second `pip download` fetches, without its start and its
# second pass over the index's pages. Left to pip: a file the report gives no SHA-256 or no http(s) URL for, any
# that fails here (its words go to the log, without its URL), and all of them where the index URL holds credentials:
# the report's URLs have them removed (pip's DirectUrl.redacted_url drops the user:password of download_info.url),
# and pip, which has them, sends them. The lock's entries of what came.
def fetch_direct(
    urls: "dict[tuple[str, str], str]", expected: "dict[tuple[str, str], str]", folder: str, log: str, deadline: float, index_url: str
) -> "list[dict[str, Any]]":
    import urllib.parse
    from concurrent.futures import ThreadPoolExecutor

    os.makedirs(folder, 0o700, exist_ok=True)
    if urllib.parse.urlsplit(index_url).username is not None:
        return []
    todo = [(key, url) for key, url in sorted(urls.items()) if expected.get(key) and url.split(":", 1)[0] in ("http", "https")]
    with ThreadPoolExecutor(max_workers=FETCHES) as pool:
        came = list(pool.map(lambda job: fetch_one(job[0], job[1], expected[job[0]], folder, log, deadline), todo))
    return [item for item in came if item is not None]


def fetch_one(key: "tuple[str, str]", url: str, sha256: str, folder: str, log: str, deadline: float) -> "dict[str, Any] | None":
    import hashlib
    import urllib.parse
    import urllib.request

    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
    parts = name[: -len(".whl")].split("-") if name.endswith(".whl") else []
    if len(parts) < 5 or (canonical(parts[0]), parts[1]) != key or os.sep in name or name.startswith("."):
        return None
    path = os.path.join(folder, name)
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=min(60.0, deadline_left(deadline))) as answer, open(path, "xb") as out:
            while True:
                chunk = answer.read(CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_WHEEL_BYTES:
                    raise ValueError("larger than any wheel")
                deadline_left(deadline)
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != sha256:
            raise ValueError("not the SHA-256 the index gave")
    except (OSError, ValueError) as err:
        remove(path)
        with open(log, "a") as out:
            out.write("tpuctl: " + name + " not fetched directly (" + type(err).__name__ + "), left to pip download" + chr(10))
        return None
    return {"name": key[0], "version": key[1], "file": name, "sha256": sha256, "size": size}


def requirement_name(text: str) -> str:
    name = ""
    for char in text.strip():
        if not (char.isalnum() or char in "-_."):
            break
        name += char
    return name


def build(header: "dict[str, Any]", deadline: float) -> None:
    key, request = hex_name(header.get("key")), hex_name(header.get("request"))
    lock = header.get("lock")
    if not isinstance(lock, list) or lock_digest(lock) != header.get("lock_hash"):
        fail("input", "the lock sent does not match its digest")
    envs = own_folder("envs")
    built = False
    if ready_lock(key) is None:
        sweep(envs)
        wheels = gather(header, lock, deadline) if lock else ""  # --setup alone: an environment with no package of its own
        room(envs, ROOM_FACTOR * sum(int(item["size"]) for item in lock) + ROOM_EXTRA)
        install(os.path.join(envs, key), wheels, lock, deadline)
        built = True
    write_atomic(os.path.join(own_folder("envs", "requests"), request), key + chr(10))
    reply({"python": env_python(key), "built": built})


# The lock's wheels in this host's folder for it, from where the header says; each one checked.
def gather(header: "dict[str, Any]", lock: "list[dict[str, Any]]", deadline: float) -> str:
    lock_hash = lock_digest(lock)
    target = os.path.join(tpuctl_cache(), "wheels", lock_hash)
    if wheels_ready(lock_hash):
        return target
    source = header.get("source")
    if source == "local":
        fail("wheels", "the lock's wheels are not on this host")
    sweep(own_folder("wheels"))
    room(own_folder("wheels"), sum(int(item["size"]) for item in lock))
    fresh = os.path.join(own_folder("wheels"), ".new-" + os.urandom(8).hex())
    os.mkdir(fresh, 0o700)
    try:
        if source == "stdin":
            untar(lock, fresh)
        elif source == "gcs":
            from_bucket(header.get("gcs") or {}, lock, fresh, deadline)
        else:
            fail("input", "the request is not one tpuctl sends")
        return keep_wheels(fresh, lock)
    finally:
        remove(fresh)


def expected(lock: "list[dict[str, Any]]") -> "dict[str, dict[str, Any]]":
    return dict((str(item["file"]), item) for item in lock)


# The wheels a tar on stdin holds (the launcher's copy): only the lock's files, regular, of the lock's size and hash.
def untar(lock: "list[dict[str, Any]]", folder: str) -> None:
    import tarfile

    wanted = expected(lock)
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as stream:
        for member in stream:
            item = wanted.get(member.name)
            if item is None or not member.isfile() or member.size != item["size"]:
                fail("wheels", "the wheels sent hold " + member.name + ", which is not the lock's")
            source = stream.extractfile(member)
            assert source is not None
            save(source.read, item, folder)
    missing = sorted(set(wanted) - set(os.listdir(folder)))
    if missing:
        fail("wheels", "the wheels sent lack " + ", ".join(missing))


# One wheel written from `read` (a bounded reader), checked against the lock as it comes.
def save(read: "Any", item: "dict[str, Any]", folder: str) -> None:
    import hashlib

    digest = hashlib.sha256()
    left = int(item["size"])
    path = os.path.join(folder, str(item["file"]))
    with open(path, "xb") as out:
        while True:
            chunk = read(min(CHUNK, left + 1))
            if not chunk:
                break
            left -= len(chunk)
            if left < 0:
                fail("wheels", str(item["file"]) + " is larger than the lock says")
            digest.update(chunk)
            out.write(chunk)
    if left or digest.hexdigest() != item["sha256"]:
        fail("wheels", str(item["file"]) + " does not match the lock's hash")


# The lock's wheels from the run's bucket (Cloud Storage's JSON API, `alt=media`), each within the deadline.
def from_bucket(gcs: "dict[str, Any]", lock: "list[dict[str, Any]]", folder: str, deadline: float) -> None:
    import urllib.error
    import urllib.parse
    import urllib.request

    endpoint, bucket, prefix = str(gcs.get("endpoint", "")).rstrip("/"), str(gcs.get("bucket", "")), str(gcs.get("prefix", ""))
    headers = {"Authorization": "Bearer " + metadata_token(deadline)} if gcs.get("token") == "metadata" else {}
    for item in lock:
        name = prefix + str(item["file"])
        url = endpoint + "/storage/v1/b/" + urllib.parse.quote(bucket, safe="") + "/o/" + urllib.parse.quote(name, safe="") + "?alt=media"
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=min(60.0, deadline_left(deadline))) as answer:
                save(answer.read, item, folder)
        except urllib.error.HTTPError as err:
            fail("wheels", "gs://" + bucket + "/" + name + ": HTTP " + str(err.code))
        except (urllib.error.URLError, OSError) as err:
            fail("wheels", "cannot read gs://" + bucket + "/" + name + ": " + str(getattr(err, "reason", err)))


# The VM's service account token, from its metadata server (GCE_METADATA_HOST, as google-auth reads it, else
# metadata.google.internal): https://cloud.google.com/compute/docs/access/authenticate-workloads#applications
def metadata_token(deadline: float) -> str:
    import json
    import urllib.request

    host = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    url = "http://" + host + "/computeMetadata/v1/instance/service-accounts/default/token"
    request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=min(10.0, deadline_left(deadline))) as answer:
            return str(json.loads(answer.read(1 << 16).decode())["access_token"])
    except (OSError, ValueError, KeyError) as err:
        fail("wheels", "no token from the metadata server to read the bucket: " + str(err))


# The environment made in a scratch folder beside its place, checked by pip's exit, and renamed into place with
# .ready in it: nothing half-installed is ever found at the key's path.
def install(target: str, wheels: str, lock: "list[dict[str, Any]]", deadline: float) -> None:
    fresh = os.path.join(os.path.dirname(target), ".new-" + os.urandom(8).hex())
    os.mkdir(fresh, 0o700)
    log = fresh + ".log"
    try:
        python = make_venv(fresh, log, deadline)
        if lock:
            pins = os.path.join(fresh, "tpuctl-pins.txt")
            lines = [str(item["name"]) + "==" + str(item["version"]) + " --hash=sha256:" + str(item["sha256"]) for item in lock]
            write_atomic(pins, "".join(line + chr(10) for line in lines))
            # No conflict check after installing: it reads the requirements of every installed distribution (the
            # image's too: about a second of CPU a host), and the lock was resolved by pip against those same
            # packages, over this same Python; a conflict it found would be a warning in a log no one reads.
            argv = [python, "-m", "pip", "install", "--no-index", "--find-links", wheels, "--require-hashes", "--no-warn-script-location"]
            argv += ["--no-warn-conflicts", "-r", pins]
            if run(argv, log, deadline, pip_env("")) != 0:
                fail(*pip_failure(log), log=tail(log))
        relocate(fresh, fresh, target)
        place(fresh, target, lock)
    finally:
        remove(fresh)
        remove(log)


# --setup, once per environment: the environment's bin first on PATH, in the run's working directory where it
# exists; its output is this command's own (the launcher keeps it in the run's logs); the whole group killed at the
# deadline. The marker is written only once it succeeded. Its output goes out as it comes (setup_output.py reads it).
def setup(header: "dict[str, Any]", deadline: float) -> None:
    import subprocess

    key, digest = hex_name(header.get("key")), hex_name(header.get("hash"))
    folder = os.path.join(tpuctl_cache(), "envs", key)
    marker = os.path.join(folder, ".setup-" + digest)
    if ready_lock(key) is None:
        fail("input", "no environment " + key + " on this host")
    if os.path.isfile(marker):
        reply({"ran": False})
        return
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env.update(PATH=os.path.join(folder, "bin") + ":" + env.get("PATH", "/usr/bin:/bin"), VIRTUAL_ENV=folder)
    env["PYTHONUNBUFFERED"] = "1"  # a Python step's lines reach the launcher as they are printed, not at its end
    workdir = str(header.get("workdir") or "")
    cwd = workdir if os.path.isdir(workdir) else os.path.expanduser("~")
    argv = ["/bin/sh", "-c", str(header.get("command", ""))]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True)
    status = wait(proc, deadline)
    if status != 0:
        reply({"error": {"kind": "setup", "status": status, "message": "--setup failed"}})
        os._exit(3)
    write_atomic(marker, "")
    reply({"ran": True})


# The lock's wheels as a tar on stdout (the launcher keeps a copy, and hands it to the other hosts).
def pack(lock_hash: str) -> None:
    import tarfile

    folder = os.path.join(tpuctl_cache(), "wheels", hex_name(lock_hash))
    if not wheels_ready(lock_hash):
        fail("wheels", "the lock's wheels are not on this host")
    names = sorted(name for name in os.listdir(folder) if name.endswith(".whl"))
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as stream:
        for name in names:
            stream.add(os.path.join(folder, name), arcname=name, recursive=False)


def main(argv: "list[str]") -> None:
    import time

    command = argv[0]
    if command == "probe":
        probe(argv[1], argv[2], argv[3])
        return
    if command == "pack":
        pack(argv[1])
        return
    if command == "pack-env":
        pack_env(argv[1])
        return
    header = read_header()
    if command in ("build", "copy"):
        header["key"] = argv[1]  # the one field that differs by host: the header and a tar after it are shared
    if command == "copy":
        header["size"] = argv[2]  # the tar's, known once the header was written ahead of it
    deadline = time.monotonic() + float(header.get("deadline_s", 600))
    commands = {"resolve": resolve, "build": build, "copy": copy, "setup": setup}
    if command not in commands:
        fail("input", "no such command: " + command)
    commands[command](header, deadline)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Failed as failed:
        reply({"error": {"kind": failed.kind, "message": str(failed), "log": failed.log}})
        os._exit(3)
    except OSError as err:
        where = err.filename if isinstance(err.filename, str) else ""
        if err.errno == 28:  # ENOSPC
            reply({"error": {"kind": "disk", "message": out_of_room(where or tpuctl_cache())}})
        else:
            reply({"error": {"kind": "os", "message": str(err.strerror or err) + (": " + where if where else "")}})
        os._exit(3)
    except (ValueError, KeyError, TypeError) as err:
        reply({"error": {"kind": "input", "message": "the request is not one tpuctl sends (" + type(err).__name__ + ")"}})
        os._exit(3)
    except Exception as err:
        import subprocess

        if not isinstance(err, subprocess.TimeoutExpired):
            raise
        reply({"error": {"kind": "timeout", "message": "ran out of time"}})
        os._exit(3)
