"""Cloud settings: one precedence order, provenance, gcloud's files, hostile values and files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.conftest import run_tpuctl
from tpuctl.inputs.errors import TpuctlError
from tpuctl.settings import cloud as settings
from tpuctl.settings import files as config


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No real user file, gcloud config or TPUCTL_* variable leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("TPUCTL_", "CLOUDSDK_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TPUCTL_CONFIG", str(tmp_path / "user.toml"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _gcloud(home: Path, name: str, text: str) -> None:
    folder = home / "gcloud" / "configurations"
    folder.mkdir(parents=True, exist_ok=True)
    (home / "gcloud" / "active_config").write_text(name)
    (folder / f"config_{name}").write_text(text)


def test_each_layer_beats_the_ones_below(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _gcloud(isolated, "work", "[core]\nproject = from-gcloud\n[compute]\nzone = us-east1-d\n")
    assert settings.resolve().get("project") == "from-gcloud"
    assert settings.resolve().source("project") == "gcloud configuration 'work'"
    (isolated / "user.toml").write_text('[cloud]\nproject = "from-user"\n')
    assert settings.resolve().get("project") == "from-user"
    (isolated / "tpuctl.toml").write_text('[cloud]\nproject = "from-here"\n')
    assert settings.resolve().source("project") == str(isolated / "tpuctl.toml")
    monkeypatch.setenv("TPUCTL_PROJECT", "from-env")
    assert settings.resolve().get("project") == "from-env"
    chosen = settings.resolve({"project": "from-flag"})
    assert (chosen.get("project"), chosen.source("project")) == ("from-flag", "--project")
    # Layers are per setting: the zone still comes from gcloud.
    assert (chosen.get("zone"), chosen.source("zone")) == ("us-east1-d", "gcloud configuration 'work'")


def test_gcloud_environment_overrides_its_file(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _gcloud(isolated, "default", "[compute]\nzone = us-east1-d\n")
    monkeypatch.setenv("CLOUDSDK_COMPUTE_ZONE", "europe-west4-a")
    found = settings.resolve()
    assert (found.get("zone"), found.source("zone")) == ("europe-west4-a", "CLOUDSDK_COMPUTE_ZONE")


def test_defaults_and_unset(isolated: Path) -> None:
    found = settings.resolve()
    assert (found.get("tpu-endpoint"), found.source("tpu-endpoint")) == ("https://tpu.googleapis.com", "default")
    assert found.source("project") == "unset"
    with pytest.raises(TpuctlError, match="no project set") as caught:
        found.require("project")
    assert "TPUCTL_PROJECT" in str(caught.value.hint)


def test_a_damaged_gcloud_file_is_ignored(isolated: Path) -> None:
    _gcloud(isolated, "default", "[core\nproject = x\n\x00")
    assert settings.resolve().source("project") == "unset"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("project", "Bad_Project"),
        ("zone", "us-central1"),
        ("tpu-endpoint", "ftp://x"),
        ("model-dir", "/local/dir"),
        ("accelerator-type", "v4"),
        ("accelerator-type", "v4-0"),
        ("accelerator-type", "tpu-v4-podslice"),
    ],
)
def test_bad_values_name_their_source(isolated: Path, monkeypatch: pytest.MonkeyPatch, key: str, value: str) -> None:
    monkeypatch.setenv(settings.BY_KEY[key].env, value)
    with pytest.raises(TpuctlError, match=f"{key} .* from {settings.BY_KEY[key].env} is not valid"):
        settings.resolve()


@pytest.mark.parametrize("value", ["v5litepod-16", "v5e-8", "v6e-256", "v9-8"])
def test_accelerator_types_follow_the_table_grammar(isolated: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """Any GENERATION-N passes, a generation newer than tpuctl included: the TPU API says what a zone offers."""
    monkeypatch.setenv("TPUCTL_ACCELERATOR_TYPE", value)
    assert settings.resolve().get("accelerator-type") == value


def test_unknown_and_mistyped_keys_in_cloud_table(isolated: Path) -> None:
    (isolated / "tpuctl.toml").write_text('[cloud]\nzonee = "x"\n')
    with pytest.raises(TpuctlError, match="unknown setting cloud.zonee"):
        settings.resolve()
    (isolated / "tpuctl.toml").write_text("[cloud]\nzone = 3\n")
    with pytest.raises(TpuctlError, match="must be a string"):
        settings.resolve()


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from([s.key for s in settings.SETTINGS] + ["x"]), st.one_of(st.text(max_size=30), st.integers(), st.booleans()), max_size=5))
def test_hostile_cloud_tables_give_an_error_or_valid_settings(isolated: Path, table: dict[str, object]) -> None:
    import tomli_w

    (isolated / "tpuctl.toml").write_text(tomli_w.dumps({"cloud": table}))
    try:
        found = settings.resolve()
    except TpuctlError as err:
        assert "\n" not in err.message
        return
    for setting, value in found.items():
        if value.value is not None and value.source != "default":
            assert setting.check(value.value) is None


def test_update_section_keeps_everything_else(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    original = '# my settings\n[launch]\nworkers = 3  # keep this comment\n\n[cloud]\nzone = "us-east1-d"\nproject = "old-one"\n\n[other]\nx = 1\n'
    path.write_text(original)
    assert config.update_section(path, "cloud", {"project": "new-project", "zone": "us-east1-d"})
    text = path.read_text()
    assert text.startswith('# my settings\n[launch]\nworkers = 3  # keep this comment\n')
    assert text.endswith("[other]\nx = 1\n")
    assert config.read_file(path)["cloud"] == {"zone": "us-east1-d", "project": "new-project"}
    assert not config.update_section(path, "cloud", {"project": "new-project"})
    assert path.read_text() == text


def test_update_section_appends_and_refuses_what_it_cannot_edit_safely(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[launch]\nworkers = 2")
    config.update_section(path, "cloud", {"zone": "us-east1-d"})
    assert config.read_file(path) == {"launch": {"workers": 2}, "cloud": {"zone": "us-east1-d"}}
    dotted = tmp_path / "dotted.toml"
    dotted.write_text('cloud.zone = "us-east1-d"\n')
    before = dotted.read_text()
    with pytest.raises(TpuctlError, match="cannot update"):
        config.update_section(dotted, "cloud", {"project": "abcdef"})
    assert dotted.read_text() == before


def test_config_show_names_sources(isolated: Path) -> None:
    (isolated / "tpuctl.toml").write_text('[cloud]\nzone = "us-central2-b"\n')
    env = {**os.environ, "TPUCTL_PROJECT": "env-project"}
    result = run_tpuctl("config", "show", "--json", cwd=isolated, env=env)
    assert result.returncode == 0, result.stderr
    import json

    data = json.loads(result.stdout)
    assert data["project"] == {"value": "env-project", "source": "TPUCTL_PROJECT", "env": "TPUCTL_PROJECT"}
    assert data["zone"]["source"] == str(isolated / "tpuctl.toml")
    bad = run_tpuctl("config", "show", cwd=isolated, env={**env, "TPUCTL_ZONE": "nowhere"})
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "TPUCTL_ZONE" in bad.stderr


@pytest.mark.parametrize("key", ["credentials", "access_token_file", "tpu_endpoint", "project"])
def test_a_nul_byte_in_a_setting_is_one_error(isolated: Path, key: str) -> None:
    value = {"credentials": "key\x00.json", "access_token_file": "tok\x00", "tpu_endpoint": "https://a\x00b", "project": "my-pro\x00ject"}[key]
    with pytest.raises(TpuctlError, match="NUL byte"):
        settings.resolve({key: value})


def test_a_nul_byte_in_the_cloud_table_is_one_error(isolated: Path) -> None:
    (isolated / "user.toml").write_text('[cloud]\ncredentials = "key\\u0000.json"\n')
    with pytest.raises(TpuctlError, match="NUL byte"):
        settings.resolve()


def test_a_deep_cloud_table_is_one_error(isolated: Path) -> None:
    (isolated / "tpuctl.toml").write_text("[cloud]\nproject = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(TpuctlError, match="nests deeper"):
        settings.resolve()


@pytest.mark.parametrize("key", ["credentials", "access_token_file"])
def test_a_device_or_fifo_as_key_file_is_refused_before_it_is_read(isolated: Path, key: str) -> None:
    os.mkfifo(isolated / "fifo")
    for value in ("/dev/zero", str(isolated / "fifo"), str(isolated)):
        with pytest.raises(TpuctlError, match="regular file"):
            settings.resolve({key: value})


def test_config_show_never_prints_the_billing_api_key(isolated: Path) -> None:
    """Issue 36: an API key is a credential; `config show` says it is set and where from, not what it is."""
    key = "AIzaSyD-" + "k3y" * 9
    (isolated / "tpuctl.toml").write_text(f'[cloud]\nbilling-api-key = "{key}"\n')
    for args in (("config", "show"), ("config", "show", "--json")):
        result = run_tpuctl(*args, cwd=isolated, env={**os.environ, "TPUCTL_PROJECT": "env-project"})
        assert result.returncode == 0, result.stderr
        assert key not in result.stdout + result.stderr and "(hidden)" in result.stdout
    assert settings.resolve().get("billing-api-key") == key
    bad = run_tpuctl("config", "show", cwd=isolated, env={**os.environ, "TPUCTL_BILLING_API_KEY": key + "!"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "TPUCTL_BILLING_API_KEY" in bad.stderr and key not in bad.stderr
