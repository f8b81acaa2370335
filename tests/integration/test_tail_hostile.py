"""`tpuctl tail` under hostile input and faults: one line and an exit status, never a traceback or a hang.

Each case here was a traceback, a hang, invalid output or a raw escape sequence
on the terminal before issue 12 (see docs/tail.md, "Failure behaviour").
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl, tpuctl_cmd
from tests.standins.event_files import header_event, malformed_events, scalar_event
from tests.standins.processes import on_a_terminal
from tpuctl.watch.records import frame

ESC = "\x1b[31mred\x1b]0;pwned\x07"  # colour, then a window title: neither may reach a terminal raw


def strict_json(line: str) -> dict[str, object]:
    def refuse(constant: str) -> object:
        raise AssertionError(f"bare {constant} in {line!r}")

    loaded: dict[str, object] = json.loads(line, parse_constant=refuse)
    return loaded


def test_malformed_protobuf_in_a_valid_record_is_skipped_and_noted_in_every_mode(tmp_path: Path) -> None:
    body = header_event() + scalar_event("loss", 1, 0.5) + b"".join(malformed_events()) + scalar_event("loss", 2, 0.25)
    (tmp_path / "events.out.tfevents.1").write_bytes(body)
    as_json = run_tpuctl("tail", str(tmp_path), "--once", "--json")
    assert as_json.returncode == 0 and "Traceback" not in as_json.stderr, as_json.stderr
    events = [strict_json(line) for line in as_json.stdout.splitlines()]
    assert [e["step"] for e in events if e["kind"] == "scalar"] == [1, 2]
    damage = [e for e in events if e["kind"] == "damage"]
    assert len(damage) == 3 and all("not a valid event" in str(d["tag"]) for d in damage)
    plain = run_tpuctl("tail", str(tmp_path), "--once")
    assert plain.returncode == 0 and plain.stdout.splitlines() == [". loss step=1 value=0.5", ". loss step=2 value=0.25"]
    assert plain.stderr.count("not a valid event") == 3 and "Traceback" not in plain.stderr


def test_json_never_prints_bare_nan_or_infinity(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2

    simple = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="t", simple_value=1.0)])
    nan_time = frame(event_pb2.Event(wall_time=float("nan"), step=5, summary=simple).SerializeToString())
    body = header_event() + scalar_event("loss", 1, float("nan")) + scalar_event("loss", 2, float("inf")) + scalar_event("loss", 3, float("-inf")) + nan_time
    (tmp_path / "events.out.tfevents.1").write_bytes(body)
    result = run_tpuctl("tail", str(tmp_path), "--once", "--json")
    assert result.returncode == 0, result.stderr
    events = [strict_json(line) for line in result.stdout.splitlines()]
    assert [(e["value"], e["wall_time"]) for e in events][:3] == [("nan", 1.7e9 + 1), ("inf", 1.7e9 + 2), ("-inf", 1.7e9 + 3)]
    assert events[3]["wall_time"] == "nan" and events[3]["value"] == 1.0
    done = subprocess.run(["jq", "-c", ".value"], input=result.stdout, capture_output=True, text=True, check=False) if _has("jq") else None
    assert done is None or done.returncode == 0, done.stderr if done else ""


def _has(program: str) -> bool:
    return any((Path(folder) / program).exists() for folder in os.environ.get("PATH", "").split(os.pathsep))


def _escapes_tree(tmp_path: Path) -> Path:
    run = tmp_path / f"run{ESC}"
    run.mkdir()
    (run / f"events.out.tfevents.{ESC}").write_bytes(header_event() + scalar_event(f"loss{ESC}", 1, 0.5) + b"\x00" * 40 + scalar_event("ok", 2, 1.0))
    (run / "checkpoint").write_text(f'model_checkpoint_path: "ckpt{ESC}-7"\n', encoding="utf-8")
    (run / f"ckpt{ESC}-7.index").write_bytes(b"")
    return run


def test_escape_sequences_in_tags_and_names_never_reach_the_terminal_raw(tmp_path: Path) -> None:
    _escapes_tree(tmp_path)
    plain = run_tpuctl("tail", str(tmp_path), "--once")
    assert plain.returncode == 0, plain.stderr
    for stream in (plain.stdout, plain.stderr):
        assert "\x1b" not in stream and "\x07" not in stream, stream
    assert "\\x1b[31mred" in plain.stdout and "\\x1b" in plain.stderr  # shown, escaped
    done, screen = on_a_terminal(tpuctl_cmd("tail", str(tmp_path), "--once"), {**os.environ, "COLUMNS": "200", "TERM": "xterm"})
    assert done.returncode == 0, done.stderr
    assert ESC.encode() not in screen and b"\x1b[31mred" not in screen and b"\x07" not in screen and b"\x1b]0;" not in screen
    assert b"\x1b" not in done.stderr


def _many_events(tmp_path: Path, count: int = 20000) -> None:
    one = scalar_event("loss", 1, 0.5)
    (tmp_path / "events.out.tfevents.1").write_bytes(header_event() + one * count)


@pytest.mark.parametrize("mode", [("--json",), ()])
def test_a_closed_pipe_ends_the_tail_quietly(tmp_path: Path, mode: tuple[str, ...]) -> None:
    _many_events(tmp_path)
    tail = subprocess.Popen(tpuctl_cmd("tail", str(tmp_path), "--once", *mode), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert tail.stdout is not None and tail.stderr is not None
    assert tail.stdout.readline()  # `| head -1`
    tail.stdout.close()
    err = tail.stderr.read().decode()
    assert tail.wait(timeout=60) == 0 and err == "", err


@pytest.mark.parametrize(
    ("option", "value"),
    [(o, v) for o in ("--until-idle", "--interval") for v in ("nan", "inf", "-inf", "-1", "1e300", "0", "x")],
)
def test_durations_must_be_finite_positive_seconds(tmp_path: Path, option: str, value: str) -> None:
    started = time.monotonic()
    result = run_tpuctl("tail", str(tmp_path), option, value, timeout=30)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and option in result.stderr, result.stderr
    assert "seconds" in result.stderr and time.monotonic() - started < 20


def _closed_port() -> str:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}"


def test_unreachable_storage_is_one_line_within_seconds(tmp_path: Path) -> None:
    env = {**os.environ, "STORAGE_EMULATOR_HOST": _closed_port()}
    started = time.monotonic()
    result = run_tpuctl("tail", "gs://runs/exp1", "--once", env=env, timeout=60)
    took = time.monotonic() - started
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("Error: cannot read gs://runs/exp1: ") and "Traceback" not in result.stderr
    assert took < 20, took


def test_unreachable_storage_while_following_keeps_following(tmp_path: Path) -> None:
    env = {**os.environ, "STORAGE_EMULATOR_HOST": _closed_port()}
    result = run_tpuctl("tail", "gs://runs/exp1", "--until-idle", "1", "--interval", "0.2", env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("tpuctl: ") for line in lines), lines
    assert "warning: cannot read gs://runs/exp1 now (" in lines[0] and lines[0].endswith("; retrying")


def test_five_megabytes_of_garbage_are_skipped_fast(tmp_path: Path) -> None:
    import random

    garbage = random.Random(12).randbytes(5 << 20)
    body = header_event() + scalar_event("loss", 1, 0.5) + garbage + scalar_event("loss", 2, 0.25) + bytes(5 << 20) + scalar_event("loss", 3, 0.125)
    (tmp_path / "events.out.tfevents.1").write_bytes(body)
    started = time.monotonic()
    result = run_tpuctl("tail", str(tmp_path), "--once", "--json")
    took = time.monotonic() - started
    events = [strict_json(line) for line in result.stdout.splitlines()]
    assert [e["step"] for e in events if e["kind"] == "scalar"] == [1, 2, 3]
    assert {e["kind"] for e in events} == {"scalar", "damage"}
    assert took < 5, took  # the whole command, start-up included; the skipping itself is timed in tests/unit
