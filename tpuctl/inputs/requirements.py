"""The requirements file a launch installs on its hosts (`--requirements FILE`, `[launch] requirements`), read as pip
reads one (https://pip.pypa.io/en/stable/reference/requirements-file-format/), and the one rule about what it may
install on a TPU VM.

The hosts get requirements and nothing else: every line names a project on the package index the launch resolves
from, so one resolution serves every host. A line that would make the hosts' pip reach elsewhere (an editable
install, another index or a page of links, a nested file, version control, a URL, a path only this machine has),
an option pip would apply to the whole file, two lines for one project, or text no pip reads the same way is
refused naming FILE:LINE, with what to do instead; what a refused line shows never includes a URL's credentials.

TensorFlow on a TPU VM is the image's: its TensorFlow is built for the TPU and paired with its libtpu
(tpuctl/tpu/software.py), and the environment tpuctl builds there keeps the image's site-packages visible, so a
requirement that installs another TensorFlow, libtpu or JAX's runtime would put it first on the workers' path.
`refuse_image_software` and `refuse_setup_software` refuse those before anything is created, unless
--replace-tensorflow says the user means it; `protected_in` finds them among the projects a resolution chose.

A JAX run (framework "jax") is the other way round: its image has no framework (the JAX images of
tpuctl/tpu/software.py: "install the framework you want to use"), so jax[tpu], jax, jaxlib, libtpu and keras are what
its --requirements must bring. Only a TPU build of TensorFlow is refused there: it would hold the TPU beside JAX, the
image's accelerator stack for that run; a TensorFlow without TPU support (for tf.data) leaves the TPU alone.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs import parse, pep508
from tpuctl.inputs.errors import TpuctlError, one_line
from tpuctl.inputs.redact import url_credentials_hidden

# A run's framework as job.framework names it (tpuctl.cluster.worker_contract, a layer above this one).
TENSORFLOW, JAX = "tensorflow", "jax"
MAX_BYTES = parse.MAX_FILE_BYTES  # a requirements file with a hash for every wheel of every project is a few hundred KB
MAX_LINE = 64 * 1024  # a line with its continuations: grpcio's hashes for every wheel of one version are ~6 KB
# pip's: a comment is `#` at the start or after whitespace (pip/_internal/req/req_file.py, COMMENT_RE) ...
_COMMENT = re.compile(r"(^|\s+)#.*$")
# ... and it expands ${VAR} from the environment of the machine it runs on (ENV_VAR_RE there), here the hosts.
_ENV_VAR = re.compile(r"\$\{[A-Z0-9_]+\}")
_VCS = re.compile(r"(?:^|@\s*)(git|hg|svn|bzr)\+", re.IGNORECASE)  # a VCS URL, alone or after NAME @
# pip's archive extensions (pip/_internal/utils/filetypes.py): a requirement that ends with one is a file to it.
_ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz", ".tar.lz", ".tar.lzma")
# pip's --hash: sha256, sha384 or sha512 (pip/_internal/utils/hashes.py, STRONG_HASHES), hex of that length.
_HASH = re.compile(r"(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})\Z", re.IGNORECASE)
_FORMAT_HINT = "one requirement a line: NAME[EXTRAS] SPECIFIERS ; MARKER, e.g. keras-hub>=0.18 (docs/environments.md)"
_ELSEWHERE_HINT = (
    "the hosts install from the package index only: publish a wheel of it there (--index-url), "
    "or put the package's source in the script's folder, which --sync sends and the workers import from"
)
# Options a requirements file may hold that the hosts must not get from it, each with what it is and what to do.
_OPTIONS = {
    "-e": ("an editable install", "put the package in the script's folder, which --sync sends and the workers import from"),
    "--editable": ("an editable install", "put the package in the script's folder, which --sync sends and the workers import from"),
    "-i": ("a package index", "give it to tpuctl: --index-url URL (its credentials are never printed)"),
    "--index-url": ("a package index", "give it to tpuctl: --index-url URL (its credentials are never printed)"),
    "--extra-index-url": ("a second package index", "one index for the run: --index-url URL (an index that mirrors both)"),
    "--no-index": ("no package index", "the hosts resolve from one index: --index-url URL"),
    "-f": ("a page or folder of archives", "serve them from your package index (--index-url)"),
    "--find-links": ("a page or folder of archives", "serve them from your package index (--index-url)"),
    "--trusted-host": ("a host trusted without TLS", "serve the index over https, or give its URL to --index-url"),
    "-r": ("another requirements file", "put its lines in this file: one file, one resolution for the run"),
    "--requirement": ("another requirements file", "put its lines in this file: one file, one resolution for the run"),
    "-c": ("a constraints file", "pin the versions on this file's own lines"),
    "--constraint": ("a constraints file", "pin the versions on this file's own lines"),
    "--pre": ("pre-releases for every line", "name the pre-release on its line, e.g. keras-hub>=0.19.0rc1"),
    "--require-hashes": ("hash checking", "a --hash on each line already turns it on"),
}
_OTHER_OPTION = ("an option for the whole file", "remove it: the hosts get requirements only; tpuctl's flags set the index (--index-url)")


@dataclass(frozen=True)
class Requirement:
    line: int  # 1-based line in the file (a line continued with `\` is its first)
    text: str  # the requirement as pip reads it (comment, options and surrounding space removed), e.g. "keras-hub>=0.18"
    name: str  # PEP 503-normalized project name, e.g. "keras-hub"
    extras: tuple[str, ...] = ()  # normalized, e.g. ("tpu",) for jax[tpu]
    hashes: tuple[str, ...] = ()  # its --hash values, e.g. "sha256:..."; pip checks every archive against them
    marker: pep508.Marker | None = None  # where pip installs it (`; sys_platform == "linux"`); None: everywhere

    @property
    def pip_line(self) -> str:
        """The line as the hosts' pip gets it: the requirement, then its hashes (which turn pip's hash checking on)."""
        return " ".join([self.text, *(f"--hash={value}" for value in self.hashes)])


@dataclass(frozen=True)
class Requirements:
    source: str  # the path as the user gave it
    lines: tuple[Requirement, ...]

    def pip_text(self) -> str:
        """One requirement per line, what the hosts' pip gets: no comments, no options but each line's --hash."""
        return "".join(requirement.pip_line + "\n" for requirement in self.lines)


def read_requirements(path: str) -> Requirements:
    """The requirements file at `path`, read (at most MAX_BYTES, never past a FIFO or a device) and checked line by
    line; anything the hosts must not get is one TpuctlError naming FILE:LINE."""
    data = parse.read_small_bytes(Path(parse.check_text(path, "requirements file")), "requirements file", limit=MAX_BYTES)
    if data is None:
        raise TpuctlError(f"requirements file {parse.shown(path, 200)} does not exist", hint="give the path of a pip requirements file")
    return parse_requirements(data, path)


def parse_requirements(data: bytes, source: str) -> Requirements:
    """`data` read as a requirements file named `source` (what messages call it)."""
    where = one_line(source, 200)
    found: dict[str, Requirement] = {}
    for number, line in _logical_lines(_text(data, where), where):
        requirement = _requirement(line, f"{where}:{number}", number)
        if requirement is None:
            continue
        earlier = found.get(requirement.name)
        if earlier is not None:
            raise TpuctlError(
                f"{where}:{number}: {requirement.name} is already required on line {earlier.line}",
                hint="one line a project, one resolution for the run: put both specifiers on one line, e.g. numpy>=1.26,<2",
            )
        found[requirement.name] = requirement
    return Requirements(source, tuple(found.values()))


def _text(data: bytes, where: str) -> str:
    """UTF-8 text (a UTF-8 byte order mark dropped) of printable lines: no NUL, escape or other control character, no
    line separator besides \\n and \\r\\n, each refused naming its line."""
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise TpuctlError(f"{where}:{line}: a NUL byte: this is not a text file", hint=_FORMAT_HINT)
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise TpuctlError(f"{where}:{line}: not UTF-8 text", hint="save the file as UTF-8") from None
    text = text.replace("\r\n", "\n")
    if not text.replace("\n", "").replace("\t", "").isprintable():
        at = next(i for i, c in enumerate(text) if not c.isprintable() and c not in "\n\t")
        line = text.count("\n", 0, at) + 1
        raise TpuctlError(f"{where}:{line}: a control character ({text[at]!r})", hint=_FORMAT_HINT)
    return text


def _logical_lines(text: str, where: str) -> Iterator[tuple[int, str]]:
    """(first line's number, line) with continuations joined as pip joins them (req_file.py, join_lines): a line ending
    in `\\` goes on with the next, unless it is a comment; each is at most MAX_LINE characters."""
    joined: list[str] = []
    first = size = 0
    for number, line in enumerate(text.split("\n"), 1):
        is_comment = _COMMENT.match(line) is not None
        if not joined:
            first, size = number, 0
        size += len(line)
        if size > MAX_LINE:
            raise TpuctlError(f"{where}:{first}: a line longer than {MAX_LINE} characters", hint=_FORMAT_HINT)
        if line.endswith("\\") and not is_comment:
            joined.append(line.strip("\\"))
            continue
        joined.append(" " + line if is_comment and joined else line)
        yield first, "".join(joined)
        joined = []
    if joined:
        yield first, "".join(joined)


def _shown(text: str) -> str:
    """A line as a message quotes it: a URL's credentials hidden, one line, cut."""
    return repr(one_line(url_credentials_hidden(text), 120))


def _requirement(line: str, where: str, number: int) -> Requirement | None:
    """The line's requirement, None for a blank or comment line; anything else is refused."""
    content = _COMMENT.sub("", line).strip()
    if not content:
        return None
    if _ENV_VAR.search(content):
        raise TpuctlError(
            f"{where}: {_shown(content)} names an environment variable, which pip would expand on each host",
            hint="write the value itself; a credential belongs in --index-url's URL or the hosts' pip configuration",
        )
    tokens = content.split(" ")  # pip's break_args_options: the requirement ends at the first word that starts with -
    cut = next((i for i, token in enumerate(tokens) if token.startswith("-")), len(tokens))
    text, options = " ".join(tokens[:cut]).strip(), " ".join(tokens[cut:])
    if not text:
        option = options.split("=", 1)[0].split(" ", 1)[0]
        what, instead = _OPTIONS.get(option if option.startswith("--") else option[:2], _OTHER_OPTION)
        raise TpuctlError(f"{where}: {_shown(content)} asks for {what}, which tpuctl does not take from a requirements file", hint=instead)
    _refuse_elsewhere(text, where)
    try:
        spec = pep508.parse(text)
    except pep508.Invalid as why:
        raise TpuctlError(f"{where}: {_shown(text)} cannot be read: {why}", hint=_FORMAT_HINT) from None
    return Requirement(number, text, pep508.normalize(spec.name), spec.extras, _hashes(options, where), spec.marker)


def _refuse_elsewhere(text: str, where: str) -> None:
    """A requirement that names where to get it (version control, a URL, a path) rather than a project of the index."""
    head = text.split(";", 1)[0].strip()
    name = head.split("[", 1)[0].strip()
    what = (
        "version control" if _VCS.search(head)
        else "a URL" if "://" in head or head.lower().startswith("file:") or "@" in head
        else "a path on this machine" if name.startswith((".", "/", "~")) or "/" in name or "\\" in name
        else "an archive on this machine" if name.lower().endswith(_ARCHIVES)
        else None
    )  # fmt: skip
    if what is not None:
        raise TpuctlError(f"{where}: {_shown(text)} installs from {what}, which the hosts do not reach", hint=_ELSEWHERE_HINT)


def _hashes(options: str, where: str) -> tuple[str, ...]:
    """The --hash values after a requirement (pip reads them with shlex); any other option there is refused."""
    try:
        words = shlex.split(options)
    except ValueError as err:
        raise TpuctlError(f"{where}: {_shown(options)} cannot be read ({err})", hint=_FORMAT_HINT) from None
    values: list[str] = []
    at = 0
    while at < len(words):
        word = words[at]
        if word == "--hash" and at + 1 < len(words):
            value, at = words[at + 1], at + 2
        elif word.startswith("--hash="):
            value, at = word.removeprefix("--hash="), at + 1
        else:
            raise TpuctlError(f"{where}: {_shown(word)} is not an option a requirement's line may have", hint="a line may have --hash=sha256:HEX options only")
        if not _HASH.match(value):
            raise TpuctlError(f"{where}: --hash {_shown(value)} is not ALGORITHM:HEX", hint="sha256, sha384 or sha512, e.g. --hash=sha256:<64 hex digits>")
        values.append(value.lower())
    return tuple(values)


# -- TensorFlow on the hosts is the image's ---------------------------------------------------------------------------

# Every distribution that installs the `tensorflow` package (tpuctl/runtime/tf_version.py and tpuctl/doctor/facts.py
# read the same list from a machine's metadata); all but the TPU builds have no TPU support (the TPU VM guides install
# tensorflow-tpu with libtpu: https://cloud.google.com/tpu/docs/run-calculation-tensorflow).
_NO_TPU = ("a TensorFlow without TPU support", "it finds no TPU")
_TPU_BUILD = (
    "a TPU build of TensorFlow and the libtpu it pins",
    "a TensorFlow and libtpu the image was not made with may not find or drive its TPU",
)
_LIBTPU = ("a libtpu of its own", "each TensorFlow TPU build runs with the libtpu it pins (tensorflow-tpu's own dependency)")
_WHY = {
    **dict.fromkeys(
        ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos", "tensorflow-aarch64",
         "tensorflow-rocm", "tensorflow-cpu-aws", "intel-tensorflow", "tf-nightly", "tf-nightly-cpu"),
        _NO_TPU,
    ),
    **dict.fromkeys(("tensorflow-tpu", "tf-nightly-tpu"), _TPU_BUILD),
    **dict.fromkeys(("libtpu", "libtpu-nightly"), _LIBTPU),
    # libtpu lets one process hold the TPU (/tmp/libtpu_lockfile; another is told "TPU in use by process ...").
    "jaxlib": ("JAX's runtime", "it loads libtpu and holds the TPU once anything imports JAX, and the workers' TensorFlow cannot open it"),
}  # fmt: skip
PROTECTED: frozenset[str] = frozenset(_WHY)
# jax[tpu] adds libtpu (JAX's installation guide: `pip install "jax[tpu]"` brings libtpu); plain jax brings jaxlib, which
# a resolution's projects show (protected_in).
_JAX_TPU = (
    "JAX's runtime with a libtpu of JAX's own (jax[tpu])",
    "JAX holds the TPU once imported, and its libtpu is not the one the image's TensorFlow runs with",
)
# TPU VMs run Linux (https://cloud.google.com/tpu/docs/runtimes: Ubuntu images): a line whose marker needs another
# system is never installed there and is no threat to the image.
_TPU_VM = {"os_name": "posix", "sys_platform": "linux", "platform_system": "Linux"}
_INSTEAD = (
    "remove it: the image's TensorFlow is the one built for the TPU; for another, use a TPU VM whose runtime image has it "
    "(`tpuctl create --runtime-version`, or the runtime-version setting with --new-tpu; `tpuctl runtimes` lists them); "
    "--replace-tensorflow installs it anyway, for experts (docs/environments.md)"
)


# A JAX run: libtpu lets one process hold the TPU, and a TPU build of TensorFlow takes it on import, tf.data use and all
# (Colab's maintainers on googlecolab/colabtools#4567: "the libraries hold exclusive locks on the TPU ... TF is very
# aggressive about acquiring the TPU ... even if you're using it just for tf.data"); the process that comes second is told
# "The TPU is already in use by process with pid N" and JAX falls back to the CPU (jax-ml/jax#22070). tensorflow-cpu has
# no TPU support (what those maintainers advise beside JAX); the other builds' lines are not refused either: pip's
# `tensorflow` has no TPU build of its own (tensorflow-tpu is that), and a resolution that pulls a TPU build in is
# refused by its lock (protected_in).
_FIGHTS_JAX = (
    "a TPU build of TensorFlow",
    "it takes the TPU when imported, and libtpu lets one process hold it: it and JAX, the image's accelerator stack for this "
    "JAX run, would fight over the TPU",
)
_WHY_JAX = dict.fromkeys(("tensorflow-tpu", "tf-nightly-tpu"), _FIGHTS_JAX)
_INSTEAD_JAX = (
    "remove it: a JAX run's TPU is JAX's; for tf.data beside JAX take tensorflow-cpu, which has no TPU support; "
    "--replace-tensorflow installs it anyway, for experts (docs/environments.md)"
)


def breaks(name: str, extras: Iterable[str] = (), framework: str = TENSORFLOW) -> str | None:
    """What installing project `name` (with `extras`) on a TPU VM would do to the image's TensorFlow (to JAX's TPU, on a
    JAX run), in words that follow a requirement ("'tensorflow==2.21' would install ..."); None when it leaves it alone."""
    normalized = pep508.normalize(name)
    if framework == JAX:
        if normalized not in _WHY_JAX:
            return None
        what, consequence = _WHY_JAX[normalized]
    elif normalized == "jax" and "tpu" in {pep508.normalize(extra) for extra in extras}:
        what, consequence = _JAX_TPU
    elif normalized in _WHY:
        what, consequence = _WHY[normalized]
    else:
        return None
    return f"would install {what}, first on the workers' path: {consequence}"


def protected_in(names: Iterable[str], framework: str = TENSORFLOW) -> list[str]:
    """Of resolved project names (a lock's), those that would replace the image's TensorFlow (fight JAX for the TPU, on a
    JAX run), normalized, in order."""
    protected = _WHY_JAX if framework == JAX else PROTECTED
    return [name for name in dict.fromkeys(pep508.normalize(name) for name in names) if name in protected]


def instead(framework: str) -> str:
    """What to do about a refused requirement, for the run's framework."""
    return _INSTEAD_JAX if framework == JAX else _INSTEAD


def checked(path: str | None, setup: str | None, framework: str = TENSORFLOW, *, tpu_vm: bool, image: str | None, allowed: bool) -> Requirements | None:
    """A launch's --requirements file (None without one) read, and on a TPU VM of runtime image `image` both it and
    --setup held to the rule that TensorFlow there is the image's (for a JAX run: that nothing fights JAX for the TPU),
    unless `allowed` (--replace-tensorflow). GPU hosts and other machines whose TensorFlow is the user's own (`tpu_vm`
    False) take any."""
    reqs = read_requirements(path) if path else None
    if tpu_vm and reqs is not None:
        refuse_image_software(reqs, allowed=allowed, image=image, framework=framework)
    if tpu_vm and setup:
        refuse_setup_software(setup, allowed=allowed, framework=framework)
    return reqs


def refuse_image_software(reqs: Requirements, *, allowed: bool, image: str | None, framework: str = TENSORFLOW) -> None:
    """A line of `reqs` that would replace or add TensorFlow, libtpu or JAX's TPU runtime on a TPU VM whose runtime
    image is `image` (None: not known yet), or on a JAX run a TPU build of TensorFlow: refused naming FILE:LINE, unless
    `allowed` (--replace-tensorflow)."""
    if allowed:
        return
    for requirement in reqs.lines:
        why = breaks(requirement.name, requirement.extras, framework)
        if why is None or (requirement.marker is not None and pep508.holds(requirement.marker, _TPU_VM) is False):
            continue
        where = f"{one_line(reqs.source, 200)}:{requirement.line}"
        raise TpuctlError(f"{where}: {_shown(requirement.text)} {why} ({_on(image)})", hint=instead(framework))


def refuse_setup_software(command: str, *, allowed: bool, framework: str = TENSORFLOW) -> None:
    """A --setup command that pip-installs TensorFlow, libtpu or JAX's TPU runtime (`pip install tensorflow==2.21`,
    `python3 -m pip install -U "jax[tpu]"`), or on a JAX run a TPU build of TensorFlow: refused as a requirements line
    would be, unless `allowed`. Only what the command names is seen: a file it installs from (`pip install -r FILE`) is
    read by pip on the host alone."""
    if allowed:
        return
    for requested in _pip_installs(command):
        found = pep508.NAME.match(requested)
        if found is None:
            continue
        extras = requested[found.end() :].partition("]")[0].lstrip("[").split(",") if requested[found.end() :].startswith("[") else []
        why = breaks(found.group(), extras, framework)
        if why is not None:
            raise TpuctlError(f"--setup {_shown(command)}: {_shown(requested)} {why} ({_on(None)})", hint=instead(framework))


def _on(image: str | None) -> str:
    return f"on a TPU VM of image {one_line(image, 80)}" if image else "on a TPU VM"


# pip install's options that take a value (pip install --help): their value is no project to install.
_VALUED = frozenset(
    {
        "-r", "--requirement", "-c", "--constraint", "-e", "--editable", "-t", "--target", "--platform", "--python-version",
        "--implementation", "--abi", "--root", "--prefix", "--src", "--upgrade-strategy", "-C", "--config-settings",
        "--global-option", "--no-binary", "--only-binary", "--progress-bar", "--report", "-i", "--index-url",
        "--extra-index-url", "-f", "--find-links", "--log", "--proxy", "--retries", "--timeout", "--exists-action",
        "--trusted-host", "--cert", "--client-cert", "--cache-dir", "--python", "--keyring-provider", "--root-user-action",
        "--use-feature", "--use-deprecated",
    }
)  # fmt: skip
_PIP = re.compile(r"(?:.*/)?pip(?:3(?:\.[0-9]+)?)?\Z")
_SEPARATORS = frozenset("();|&<>")
# Words after which the next word is a command again: `sudo pip`, `python3 -m pip`, `uv pip`, `PIP_NO_CACHE_DIR=1 pip`.
_RUNNERS = frozenset({"sudo", "env", "exec", "nohup", "time", "uv", "-m", "then", "do", "else", "!"})
_PYTHON = re.compile(r"(?:.*/)?python(?:[0-9.]*)?\Z")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _pip_installs(command: str) -> Iterator[str]:
    """The projects each `pip install` (pip, pip3, python -m pip, uv pip, sudo pip ...) in a shell command names: pip
    as a command's first word, or after one of the words that run another command."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:  # unbalanced quotes: the shell would refuse it too; read it plainly
        words = command.split()
    starts = True  # the next word is a command's first
    for at, word in enumerate(words):
        if starts and _PIP.match(word) and words[at + 1 : at + 2] == ["install"]:
            yield from _installed(words[at + 2 :])
        starts = set(word) <= _SEPARATORS or word in _RUNNERS or _ASSIGNMENT.match(word) is not None or (starts and _PYTHON.match(word) is not None)


def _installed(words: list[str]) -> Iterator[str]:
    skip = False
    for word in words:
        if set(word) <= _SEPARATORS:
            return  # the next command
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _VALUED
        else:
            yield word
