"""Which words after SCRIPT are tpuctl's and which are the script's, said before any worker starts.

tpuctl's options may come anywhere before `--` (`tpuctl launch train.py --workers 2`, as
every example writes it), and options tpuctl does not know go to the script. Two cases make
that rule surprising, and both are caught here from the command line and the script's source
(read as text with `ast`, never run; no TensorFlow):

- a tpuctl option after SCRIPT that the script defines too (`--verbose`): tpuctl takes it,
  and says so in one line, with the way to give it to the script (`--`);
- an option after SCRIPT that is neither tpuctl's nor the script's but close to one of
  tpuctl's (`--worker 2`, `--stratgy`): a typo, refused before any worker starts (it would
  otherwise fail seconds later inside the script's argparse). Spelling that differs only by
  `_` for `-` (`--model_dir`, absl's style) is the script's, never a typo of tpuctl's.

A script whose flags cannot be read (not Python tpuctl can parse, too large) is taken to
define none: the near-miss check still applies, with `--` as the way out.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tpuctl.inputs import parse as inputs
from tpuctl.inputs.errors import TpuctlError

# tpuctl's options whose value reaches the script anyway, in its environment (TPUCTL_MODEL_DIR): a script that
# defines the same flag usually defaults it from there (examples/train_keras.py), so taking it loses nothing.
_HANDED_ON = frozenset({"--model-dir"})
# Calls whose `--x` string arguments name an option: argparse, optparse, click and typer.
_DECLARERS = frozenset({"add_argument", "add_option", "option", "Option"})


@dataclass(frozen=True)
class Reading:
    taken: list[str]  # tpuctl's options given after SCRIPT that the script defines as well
    note: str | None  # the one line to say about them, None when there are none


def defined_by(script: Path) -> set[str]:
    """The long options the script defines: argparse's add_argument('--x'), optparse's add_option, click's and
    typer's option('--x/--no-x'), and absl's flags.DEFINE_*('x') (a boolean's `--nox` too)."""
    try:
        text = inputs.read_small_text(script, "script")
        tree = ast.parse(text or "")
    except (TpuctlError, SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        words = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        if name in _DECLARERS:
            found.update(part.strip() for word in words for part in word.split("/") if part.strip().startswith("--"))
        elif name.startswith("DEFINE_") and words:
            found.add("--" + words[0])
            if name in ("DEFINE_bool", "DEFINE_boolean"):
                found.add("--no" + words[0])
    return found


def after_script(raw: Sequence[str], script: str) -> list[str]:
    """The option words between SCRIPT and `--` on the command line, names only (`--lr=0.1` -> `--lr`).
    None when `--` comes before SCRIPT: then every word after SCRIPT is the script's, as the parser took it."""
    if script not in raw or ("--" in raw and raw.index("--") < raw.index(script)):
        return []
    start = raw.index(script) + 1
    end = raw.index("--", start) if "--" in raw[start:] else len(raw)
    return [word.split("=", 1)[0] for word in raw[start:end] if word.startswith("--") and word != "--"]


def read(raw: Sequence[str], script: str, own: Iterable[str]) -> Reading:
    """Refuse a near-miss of tpuctl's options after SCRIPT; name tpuctl's options the script defines too."""
    words = after_script(raw, script)
    if not words:
        return Reading([], None)
    ours = set(own)
    theirs = defined_by(Path(script))
    for word in words:
        if word in ours or word in theirs:
            continue
        close = difflib.get_close_matches(word, sorted(ours), n=2, cutoff=0.8)
        if close and word.replace("_", "-") not in ours:
            raise TpuctlError(
                f"{word} (after SCRIPT) is not a tpuctl option, nor one the script defines; did you mean {' or '.join(close)}?",
                hint=f"to give {word} to the script anyway, put it after `--`: tpuctl launch {script} ... -- {word} ...",
            )
    taken = sorted({word for word in words if word in ours and word in theirs} - _HANDED_ON)
    if not taken:
        return Reading([], None)
    return Reading(
        taken,
        f"tpuctl took {', '.join(taken)} (its own option{'s' if len(taken) > 1 else ''}, which the script defines too); "
        f"to give {'them' if len(taken) > 1 else 'it'} to the script, put {'them' if len(taken) > 1 else 'it'} after `--`",
    )
