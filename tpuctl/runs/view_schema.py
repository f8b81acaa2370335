"""The run view's schema (tpuctl.run-view/1), spelled once: what runs/view.py writes, what the TensorBoard tab's checker
(tensorboard_plugin/checking.py) lets through, what `report --timeline` (cli/diagnosis/timeline_drawing.py) and the
tab's page (tensorboard_plugin/static/index.js, served `page_words()`) draw. The contract, field by field, is
docs/report.md ("The run's view: view.json"); tests/unit/test_view_schema.py holds the writer and the checker to it.

How a row, an attempt or the run ended is said in tpuctl's words for an end (tpuctl/endings.py), never anew here.
"""

from __future__ import annotations

from typing import Any

from tpuctl.endings import Kind

SCHEMA = "tpuctl.run-view/1"

# A row's segment kinds, in the contract's order (docs/report.md's table, the tab's legend).
ENVIRONMENT = "environment"  # the hosts' environment made ready (--requirements, --setup) before the attempt's workers
START_UP, FIRST_STEP, STEPS = "start-up", "first-step", "steps"
CHECKPOINT_SAVE, CHECKPOINT_RESTORE, EVALUATION = "checkpoint-save", "checkpoint-restore", "evaluation"
STALL = "stall"  # no step sample for a while outside the worker's own evaluation, save or restore
HANG = Kind.HANG.value  # the hang's span: the word of the end it caused
KINDS = (ENVIRONMENT, START_UP, FIRST_STEP, STEPS, CHECKPOINT_SAVE, CHECKPOINT_RESTORE, EVALUATION, STALL, HANG)

# Bounds: the writer stays within them for a run of any length, the checker cuts a file to them.
MAX_ATTEMPTS = 1_000  # attempts, restarts, goodput's attempts
MAX_ROWS = 5_000  # (attempt, worker) pairs: 64 workers x 10 attempts is 640
MAX_SEGMENTS = 20_000  # a row's: a week of checkpoints every 10 minutes is ~2,000 saves and as many step spans
RATE_BINS = 600  # a row's step-rate bins
MIN_BIN_S = 1e-3  # a rate bin's seconds, at least: a finer one is no sampling of ours (the writer's are >= 30 s)
GOODPUT_WINDOWS = 200  # goodput over time
MAX_PROFILES = 100  # kept profile verdicts
MAX_HANGS = 100  # stacks views
MAX_WORKERS = 1_024  # a verdict's workers (and its unreadable ones)
MAX_OPS = 32  # a verdict worker's top ops
MAX_NOTES = 50  # a verdict's notes
MAX_CATEGORIES = 32  # a goodput split's categories
STACKS_LIMIT = 64 << 10  # characters of one stacks view
TIME_LIMIT = 1e11  # seconds since the epoch (year 5138): a time is in [0, TIME_LIMIT), or it is not one
NUMBER_LIMIT = 1e12  # any other number's size, as a timeline's clock (runs/compact.py CLOCK_LIMIT)
# Characters of a text field, by what it holds.
WORD = 40  # a state, a backend, a cause, a capacity, a category
NAME = 120  # a run id, a worker, a node, a zone
SCRIPT = 200  # a script's file name, a worker's profile file
WORDS = 300  # an ending's or a restart's words, a stacks view's first line
PATH = 400  # a model dir, a profile's folder, a verdict's note


def page_words() -> dict[str, Any]:
    """What the tab's page needs of the schema to draw a view (the plugin's `schema` route): the segment kinds, in the
    legend's order, and the ending state drawn as a good end."""
    return {"schema": SCHEMA, "kinds": list(KINDS), "succeeded": Kind.SUCCEEDED.value}
