"""`tpuctl ssh` refuses what it cannot run before it looks anything up (tests/integration/test_tpu_ssh.py runs it for real)."""

from __future__ import annotations

import pytest

from tpuctl.inputs.errors import USAGE, TpuctlError
from tpuctl.ssh.command import SliceCommand, plan_on_slice, run_on_slice
from tpuctl.ssh.connection import Connection


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (SliceCommand("my-tpu", (), Connection()), "give a COMMAND after --, or --cleanup"),
        (SliceCommand("my-tpu", ("hostname",), Connection(ssh_option=("ProxyJump",))), "--ssh-option 'ProxyJump' is not NAME=VALUE"),
    ],
)
def test_nothing_to_run_or_a_bad_ssh_option_is_bad_input(request_: SliceCommand, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # No project, zone or credentials anywhere: a look-up would fail differently.
    for name in ("TPUCTL_PROJECT", "TPUCTL_ZONE", "TPUCTL_ACCESS_TOKEN_FILE", "TPUCTL_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(TpuctlError, match=expected) as refused:
        next(run_on_slice(request_))
    assert refused.value.exit_code == USAGE
    with pytest.raises(TpuctlError, match=expected) as refused:  # `--dry-run` refuses the same, before any look-up
        plan_on_slice(request_)
    assert refused.value.exit_code == USAGE
