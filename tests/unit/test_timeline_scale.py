"""A week-long run's timeline: streamed into compact numbers (runs/compact.py), the same report as the events give,
memory bounded by the samples, never by the file; hostile lines counted, never raised."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.standins.timelines import WALL0, write_run
from tpuctl.runs import compact, goodput
from tpuctl.runs import timeline as tl
from tpuctl.runs.folder import RunFolder


def by_events(folder: Path) -> dict[str, Any]:
    """The report as Event objects give it (timeline.read: every line through json.loads)."""
    reading = tl.read(RunFolder(folder).timeline.read_text(errors="replace").split("\n"))
    return goodput.analyse(reading.events, skipped=reading.skipped).to_json()


def test_a_timeline_past_the_old_64_mib_refusal_is_reported(tmp_path: Path) -> None:
    write_run(tmp_path, workers=4, samples=50, restarts=[20])
    expected = by_events(tmp_path)
    with RunFolder(tmp_path).timeline.open("a") as file:
        for _ in range(17):  # 68 MiB of lines no event is made of (each past LINE_LIMIT: skipped unparsed)
            file.write("x" * (4 << 20) + "\n")
    got = goodput.of_folder(RunFolder(tmp_path), live=False).to_json()
    assert got["skipped_lines"] == 17
    assert {**got, "skipped_lines": 0} == {**expected, "skipped_lines": 0}


def test_step_samples_are_kept_as_numbers_memory_grows_with_them_not_with_events(tmp_path: Path) -> None:
    write_run(tmp_path, workers=64, samples=1000, restarts=[500], save_every=60)  # 64,000 step lines, ~8.4 MB
    size = RunFolder(tmp_path).timeline.stat().st_size
    tracemalloc.start()
    try:
        report = goodput.of_folder(RunFolder(tmp_path), live=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 20 bytes a sample (1.3 MB), the arrays' growth and the reader's fixed ~2.5 MB: ~4.4 MB. 64,000 Event objects with
    # their dicts would take ~55 MB, the file's text alone as much as the file.
    assert peak < 8 << 20 < size, f"peak {peak} bytes for a {size}-byte timeline"
    assert report.to_json() == by_events(tmp_path)
    assert [a.number for a in report.attempts] == [1, 2] and report.total.categories[goodput.LOST_WORK] > 0


_worker = st.sampled_from(["worker:0", "worker:1", "chief:0", '<img src=x onerror="alert(1)">', "wörker:2", "w\\1"])
_time = st.one_of(st.floats(-10, 5000, allow_nan=False), st.sampled_from([1e12, -2e12, 1e300]))
_step = st.one_of(st.integers(-5, 10_000), st.just(10**400), st.just(None), st.floats(allow_nan=False, allow_infinity=False), st.just("7"))
_event = st.sampled_from(sorted(tl.EVENTS) + [tl.STEP] * 12)


@st.composite
def lines(draw: st.DrawFn) -> list[str]:
    """A timeline's lines: most as Timeline writes them (in and out of order), some hand-made, some garbage."""
    found = []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            found.append(draw(st.sampled_from(["", "garbage", '{"t": 1', "[]", '{"event": "step"}', "x" * 5000])))
            continue
        name = draw(_event)
        attempt = draw(st.one_of(st.none(), st.integers(1, 4), st.just(0)))
        fields: dict[str, Any] = {}
        if name in (tl.STEP, tl.FIRST_STEP):
            fields = {"step": draw(_step), "source": draw(st.sampled_from(["keras", "summary", "k9"]))}
        if name == tl.HANG:
            fields = {"idle_s": draw(st.floats(-5, 100))}
        t = draw(_time)
        line = {**fields, "t": round(t, 3), "wall": round(WALL0 + t, 3), "event": name, "attempt": attempt, "worker": draw(_worker)}
        if kind == 1:
            line = {"event": name, "worker": line["worker"], "t": line["t"], "wall": line["wall"], **fields}  # another order
        found.append(json.dumps(line))
    return found


@given(lines())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_streamed_report_is_the_events_report_whatever_the_lines(tmp_path: Path, text: list[str]) -> None:
    folder = tmp_path / "run"
    folder.mkdir(exist_ok=True)
    RunFolder(folder).timeline.write_text("\n".join(text) + "\n")
    with RunFolder(folder).timeline.open("rb") as file:
        read = compact.of_file(file, 1 << 30)
    assert goodput.of_compact(read).to_json() == by_events(folder)


def test_a_skipped_step_line_never_sends_the_next_into_another_attempts_samples(tmp_path: Path) -> None:
    def step(t: float, attempt: int, number: int) -> str:
        return json.dumps({"step": number, "source": "keras", "t": t, "wall": WALL0 + t, "event": "step", "attempt": attempt, "worker": "worker:0"})

    lines = [step(10, 1, 5), step(20, 1, 9), step(2e12, 2, 1), step(30, 2, 12), step(40, 2, 20)]
    RunFolder(tmp_path).timeline.write_text("\n".join(lines) + "\n")
    with RunFolder(tmp_path).timeline.open("rb") as file:
        read = compact.of_file(file, 1 << 30)
    assert list(read.samples[1].step) == [5, 9] and list(read.samples[2].step) == [12, 20] and read.skipped == 1
    assert goodput.of_compact(read).to_json() == by_events(tmp_path)
