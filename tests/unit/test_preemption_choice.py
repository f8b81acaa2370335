"""How tpuctl.runtime.preemption_handler sets up TensorFlow's handler for each platform, decided without TensorFlow."""

from __future__ import annotations

import enum
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from tpuctl.cluster import worker_contract as contract
from tpuctl.runtime import preemption as p


@pytest.mark.parametrize("restarter", [p.LAUNCH, p.PLAIN, p.OPERATOR])
@pytest.mark.parametrize("platform", [p.INTERNAL_CPU, p.INTERNAL_GPU])
def test_off_google_cloud_tensorflows_default_already_is_sigterm_and_42(platform: str, restarter: str) -> None:
    choice = p.choose(platform, restarter)
    assert (choice.platform, choice.exit_code, choice.restore) == (platform, None, False)  # nothing to configure
    assert "SIGTERM" in choice.summary and "exit 42" in choice.summary


@pytest.mark.parametrize("restarter", [p.LAUNCH, p.PLAIN])
def test_a_gce_cpu_vm_takes_the_sigterm_path_where_tensorflow_would_do_nothing(restarter: str) -> None:
    choice = p.choose(p.GCE_CPU, restarter)
    assert (choice.platform, choice.exit_code, choice.restore) == (p.INTERNAL_CPU, None, False)


def test_under_an_operator_tensorflows_choice_stands_and_tpuctl_only_restores() -> None:
    choice = p.choose(p.GCE_CPU, p.OPERATOR)
    assert (choice.platform, choice.exit_code, choice.restore) == (p.GCE_CPU, None, True)


def test_a_gce_gpu_vm_keeps_the_maintenance_watcher_and_exits_42_only_for_the_launcher() -> None:
    assert p.choose(p.GCE_GPU, p.LAUNCH).exit_code == contract.PREEMPTED_EXIT_CODE == 42
    for restarter in (p.PLAIN, p.OPERATOR):
        choice = p.choose(p.GCE_GPU, restarter)
        assert (choice.platform, choice.exit_code) == (p.GCE_GPU, None)  # TensorFlow's 143
    assert "maintenance event" in p.choose(p.GCE_GPU, p.LAUNCH).summary


@pytest.mark.parametrize("restarter", [p.LAUNCH, p.PLAIN, p.OPERATOR])
def test_tpus_keep_tensorflows_handling(restarter: str) -> None:
    borg = p.choose(p.INTERNAL_TPU, restarter)
    assert (borg.platform, borg.exit_code, borg.restore) == (p.INTERNAL_TPU, None, False)
    cloud = p.choose(p.GCE_TPU, restarter)  # inert in TensorFlow: tpuctl restores the latest checkpoint
    assert (cloud.platform, cloud.exit_code, cloud.restore) == (p.GCE_TPU, None, True)
    assert "does nothing" in cloud.summary


def test_unknown_platform_is_left_to_tensorflow() -> None:
    choice = p.choose("UNSUPPORTED", p.LAUNCH)
    assert (choice.platform, choice.exit_code, choice.restore) == ("UNSUPPORTED", None, False)


def test_who_restarts_a_worker() -> None:
    assert p.supervisor({contract.ATTEMPT: "1", contract.RUN_ID: "r"}) == p.LAUNCH
    assert p.supervisor({contract.RUN_ID: "r"}) == p.OPERATOR  # a Kubernetes pod: no attempt numbers
    assert p.supervisor({}) == p.PLAIN


class _Config:
    def __init__(self, termination_watcher_fn: Any = None, exit_fn: Any = None, grace_period: Any = None, save_fn: Any = None) -> None:
        self.termination_watcher_fn, self.exit_fn, self.grace_period, self.save_fn = termination_watcher_fn, exit_fn, grace_period, save_fn


FAKE_TF = SimpleNamespace(distribute=SimpleNamespace(experimental=SimpleNamespace(TerminationConfig=_Config)))


def test_config_is_none_where_tensorflows_default_does() -> None:
    assert p._config(FAKE_TF, p.choose(p.INTERNAL_CPU, p.LAUNCH), None) is None


def test_config_exit_code_and_the_callers_fields_win() -> None:
    config = p._config(FAKE_TF, p.choose(p.GCE_GPU, p.LAUNCH), None)
    with pytest.raises(SystemExit) as exited:
        config.exit_fn()
    assert exited.value.code == 42

    def mine() -> None:
        sys.exit(7)

    def watcher() -> bool:
        return False

    merged = p._config(FAKE_TF, p.choose(p.GCE_GPU, p.LAUNCH), _Config(termination_watcher_fn=watcher, exit_fn=mine, grace_period=5))
    assert (merged.termination_watcher_fn, merged.exit_fn, merged.grace_period) == (watcher, mine, 5)
    kept = p._config(FAKE_TF, p.choose(p.GCE_GPU, p.LAUNCH), _Config(grace_period=0))
    assert kept.grace_period == 0 and kept.exit_fn is not None  # tpuctl's exit where the caller set none


class _Platform(enum.Enum):
    INTERNAL_CPU = "internal_CPU"
    GCE_CPU = "GCE_CPU"


def test_tensorflow_sees_the_chosen_platform_only_while_the_handler_is_built() -> None:
    util = SimpleNamespace(PlatformDevice=_Platform, detect_platform=lambda: _Platform.GCE_CPU)
    original = util.detect_platform
    with p._platform_seen_as(util, p.INTERNAL_CPU):
        assert util.detect_platform() is _Platform.INTERNAL_CPU
    assert util.detect_platform is original
    with p._platform_seen_as(None, p.INTERNAL_CPU):
        pass  # a TensorFlow without the private module: nothing to change
