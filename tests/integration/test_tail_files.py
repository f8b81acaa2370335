"""`tpuctl tail` on files written byte by byte: split records, damage, odd files, local and gs://."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import run_tpuctl, tpuctl_cmd
from tests.standins.event_files import header_event, scalar_event
from tests.standins.processes import on_a_terminal
from tpuctl.watch.sources import GcsSource, LocalSource
from tpuctl.watch.tailer import Tailer


def tail_once(path: Path | str, *args: str, env: dict[str, str] | None = None) -> tuple[list[dict[str, object]], str, int]:
    result = run_tpuctl("tail", str(path), "--once", "--json", *args, env=env or dict(os.environ), timeout=60)
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr, result.returncode


def test_a_record_split_across_two_writes_is_read_once_complete(tmp_path: Path) -> None:
    events = tmp_path / "train" / "events.out.tfevents.1.host.1.v2"
    events.parent.mkdir()
    whole = header_event() + scalar_event("loss", 1, 0.5, plugin="scalars") + scalar_event("loss", 2, 0.25)
    events.write_bytes(whole[:-7])
    tailer = Tailer(LocalSource(str(tmp_path)))
    first = tailer.poll()
    assert [s[:3] for _, _, s in first.scalars()] == [("loss", 1, 0.5)] and not first.damage
    with events.open("ab") as handle:
        handle.write(whole[-7:])
    second = tailer.poll()
    assert [s[:3] for _, _, s in second.scalars()] == [("loss", 2, 0.25)]
    assert second.bytes_read == 7  # only what was appended
    assert not tailer.poll()  # nothing new: nothing reported twice


def test_a_flipped_byte_is_reported_once_and_skipped(tmp_path: Path) -> None:
    good = [scalar_event("loss", step, 1.0 / step) for step in range(1, 6)]
    blob = bytearray(header_event() + b"".join(good))
    offset = len(header_event()) + len(good[0]) + len(good[1])  # the third scalar event
    blob[offset + 20] ^= 0xFF
    (tmp_path / "events.out.tfevents.2").write_bytes(bytes(blob))
    events, stderr, code = tail_once(tmp_path)
    assert code == 0, stderr
    assert [e["step"] for e in events if e["kind"] == "scalar"] == [1, 2, 4, 5]
    damage = [e for e in events if e["kind"] == "damage"]
    reason = "record data fails its CRC; skipped"
    assert damage == [{"kind": "damage", "run": None, "tag": reason, "step": None, "value": offset, "wall_time": None, "file": "events.out.tfevents.2"}]
    plain = run_tpuctl("tail", str(tmp_path), "--once")
    assert f"tpuctl: warning: events.out.tfevents.2 at byte {offset}: record data fails its CRC; skipped" in plain.stderr


def test_tf1_simple_values_tags_filter_and_plain_lines(tmp_path: Path) -> None:
    body = header_event() + b"".join(scalar_event(tag, 3, 0.75, tf2=False) for tag in ("loss", "accuracy", "lr"))
    (tmp_path / "events.out.tfevents.3").write_bytes(body)
    result = run_tpuctl("tail", str(tmp_path), "--once", "--tags", "loss,acc*")
    assert result.returncode == 0
    assert result.stdout.splitlines() == [". loss step=3 value=0.75", ". accuracy step=3 value=0.75"]


def test_odd_files_and_folders(tmp_path: Path) -> None:
    (tmp_path / "events.out.tfevents.notes").write_text("this is not an event file\n" * 10)
    (tmp_path / "workertemp_1").mkdir()
    (tmp_path / "workertemp_1" / "events.out.tfevents.9").write_bytes(header_event() + scalar_event("loss", 1, 9.0))
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "events.out.tfevents.4").write_bytes(header_event() + scalar_event("loss", 7, 0.125))
    (tmp_path / "weights.epoch03.weights.h5").write_bytes(b"h5")
    backup = tmp_path / "backup" / "chief"
    backup.mkdir(parents=True)
    (backup / "checkpoint").write_text('model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-2"\n')
    (backup / "ckpt-1.index").write_bytes(b"")
    (backup / "ckpt-2.data-00000-of-00001").write_bytes(b"")  # ckpt-2 is still being written: no .index yet
    events, stderr, code = tail_once(tmp_path)
    assert code == 0, stderr
    scalars = [(e["run"], e["tag"], e["step"]) for e in events if e["kind"] == "scalar"]
    assert scalars == [("eval", "loss", 7)]  # workertemp_1 is a non-chief scratch copy
    marks = sorted((e["tag"], e["file"], e["step"]) for e in events if e["kind"] == "checkpoint")
    assert marks == [("backup", "backup/chief/ckpt-1", 1), ("keras", "weights.epoch03.weights.h5", 3)]
    assert [e["tag"] for e in events if e["kind"] == "damage"] == ["not an event file (its first bytes are no record header); ignored"]


def test_a_keras_file_is_announced_once_it_settled(tmp_path: Path) -> None:
    """Keras writes .weights.h5 in place: following, a file still changing waits for a later poll."""
    weights = tmp_path / "best.weights.h5"
    weights.write_bytes(b"partial")
    tailer = Tailer(LocalSource(str(tmp_path)))
    assert tailer.poll().checkpoints == []  # written just now: maybe still being written
    os.utime(weights, (time.time() - 5, time.time() - 5))
    assert [c.path for c in tailer.poll().checkpoints] == ["best.weights.h5"]
    assert tailer.poll().checkpoints == []  # once
    weights.write_bytes(b"overwritten by a better epoch")
    assert [c.path for c in tailer.poll(last=True).checkpoints] == ["best.weights.h5"]  # the last poll waits for nothing


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    cases = [
        (("tail", str(tmp_path / "missing"), "--once"), 1, "does not exist"),
        (("tail", str(tmp_path), "--once", "--until-idle", "3"), 2, "give one of --once, --follow, --until-idle"),
        (("tail", str(tmp_path), "--tags", "loss,,acc"), 2, "empty pattern"),
        (("tail", "s3://bucket/run", "--once"), 2, "cannot tail s3:// paths"),
        (("tail", str(tmp_path), "--interval", "0"), 2, "--interval"),
        (("tail", "x" * 300, "--once"), 2, "File name too long"),
        (("tail", str(tmp_path / "loop"), "--once"), 2, "Too many levels of symbolic links"),
    ]
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for args, code, words in cases:
        result = run_tpuctl(*args)
        assert result.returncode == code and result.stderr.count("\n") == 1 and words in result.stderr, (args, result.stderr)
    empty = run_tpuctl("tail", str(tmp_path), "--once")
    assert empty.returncode == 0 and empty.stderr == f"tpuctl: no event files under {tmp_path} yet\n"


def test_until_idle_waits_for_files_then_exits(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_tpuctl("tail", str(tmp_path), "--until-idle", "1", "--interval", "0.2")
    assert result.returncode == 0 and "yet; waiting" in result.stderr
    assert 1 <= time.monotonic() - started < 20


def test_gcs_reads_only_the_new_byte_range(gcs_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = storage.Client(project="tpuctl-test", credentials=AnonymousCredentials()).create_bucket("runs")
    name = "exp1/train/events.out.tfevents.5"
    content = header_event() + b"".join(scalar_event("loss", step, 0.5) for step in range(1, 200))
    bucket.blob(name).upload_from_string(content)
    bucket.blob("exp1/workertemp_1/events.out.tfevents.6").upload_from_string(content)
    tailer = Tailer(GcsSource("gs://runs/exp1"))
    first = tailer.poll()
    assert len(list(first.scalars())) == 199 and first.bytes_read == len(content)
    extra = scalar_event("loss", 200, 0.5)
    bucket.blob(name).upload_from_string(content + extra)  # GCS objects are rewritten, never appended
    second = tailer.poll()
    assert [s[1] for _, _, s in second.scalars()] == [200] and second.bytes_read == len(extra)

    env = {**os.environ, "STORAGE_EMULATOR_HOST": gcs_emulator}
    events, stderr, code = tail_once("gs://runs/exp1", env=env)
    assert code == 0, stderr
    assert len([e for e in events if e["kind"] == "scalar"]) == 200 and {e["run"] for e in events} == {"train"}
    missing = run_tpuctl("tail", "gs://no-such-bucket/run", "--once", env=env)
    assert missing.returncode == 1 and missing.stderr == "Error: bucket gs://no-such-bucket does not exist\n"


def test_live_view_on_a_terminal(tmp_path: Path) -> None:
    """On a TTY: one row per tag with value, step, steps/s, min/max and a sparkline, plus checkpoints."""
    values = [4.0, 3.0, 2.0, 1.0]
    body = header_event() + b"".join(scalar_event("loss", step * 10, value) for step, value in enumerate(values))
    (tmp_path / "events.out.tfevents.7").write_bytes(body)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-30"\n')
    (tmp_path / "ckpt-30.index").write_bytes(b"")
    done, screen = on_a_terminal(tpuctl_cmd("tail", str(tmp_path), "--once"), {**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    assert done.returncode == 0, done.stderr
    text = screen.decode("utf-8", "replace")
    for words in ("run", "tag", "steps/s", "recent", "loss", "ckpt-30", "█"):
        assert words in text, text
    row = next(line for line in text.splitlines() if " loss " in line)
    # last value 1 at step 30; 30 steps over 30 s of wall time; min 1, max 4; falling sparkline
    assert row.split() == [".", "loss", "1", "30", "1.00", "1", "4", "█▆▃▁"], row


def test_tail_reads_what_keras_fit_wrote(tmp_path: Path) -> None:
    """The train/ and validation/ files of a real Keras 3 fit (graph, per-batch and per-epoch scalars,
    histograms): every scalar TensorBoard's protos find, the rest counted by plugin, no warning."""
    from tests.standins.event_files import DATA, expected

    want: list[tuple[str, str, int, float]] = []
    for run in ("train", "validation"):
        data = (DATA / f"keras3-fit-{run}.tfevents").read_bytes()
        (tmp_path / run).mkdir()
        (tmp_path / run / "events.out.tfevents.1795586518.host.1.v2").write_bytes(data)
        want += [(run, tag, step, value) for tag, step, value, _ in expected(data)[0]]
    lines, stderr, code = tail_once(tmp_path)
    assert code == 0 and stderr == ""
    got = [(line["run"], line["tag"], line["step"], line["value"]) for line in lines if line["kind"] == "scalar"]
    assert got == want and any(tag == "batch_loss" for _, tag, _, _ in got) and any(tag == "epoch_loss" for _, tag, _, _ in got)
    others = {line["tag"]: line["value"] for line in lines if line["kind"] == "other"}
    assert others == {"graph_keras_model": 1, "histograms": 8}
    assert not [line for line in lines if line["kind"] == "damage"]
