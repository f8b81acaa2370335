"""The TFJob / JobSet manifests `tpuctl launch --backend kubernetes` renders.

Every shape is validated offline against the released CRD schemas (tests/data/kubernetes/)
with unknown fields refused, and its pod templates against Kubernetes' own schemas
(kubernetes-validate, strict). Hostile names, arguments and environment values must come
back out of the YAML exactly as they went in, and can never add structure.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from tests.standins import kube_schemas
from tests.standins.cli_calls import in_process
from tpuctl.backends.kubernetes import yaml_values as k8s_yaml
from tpuctl.backends.kubernetes.manifest import (
    KubeOptions,
    Manifest,
    check_name,
    render,
    tfjob_tf_config,
)
from tpuctl.cluster import jax_cluster
from tpuctl.cluster.tf_config import parse_tf_config
from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.job import Job
from tpuctl.tpu.accelerators import gke_slice

MANIFESTS = ROOT / "tpuctl" / "backends" / "kubernetes" / "manifests"
IMAGE = "us-docker.pkg.dev/proj/repo/train:1"


def job(**fields: Any) -> Job:
    return Job(**{"script": "train.py", "python": "python", **fields})


def load(manifest: Manifest) -> dict[str, Any]:
    docs = list(yaml.safe_load_all(manifest.text))
    assert len(docs) == 1
    data: dict[str, Any] = docs[0]
    return data


def assert_valid(data: dict[str, Any]) -> None:
    assert kube_schemas.errors(data) == []


def containers(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Replica type (or replicated job name) -> its one container."""
    if data["kind"] == "TFJob":
        return {t: r["template"]["spec"]["containers"][0] for t, r in data["spec"]["tfReplicaSpecs"].items()}
    return {r["name"]: r["template"]["spec"]["template"]["spec"]["containers"][0] for r in data["spec"]["replicatedJobs"]}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in container["env"]}


# ---- shapes ---------------------------------------------------------------------------------

SHAPES = {
    "1 worker": (job(), KubeOptions(image=IMAGE, name="train-1")),
    "3 workers": (job(workers=3, args=("--epochs", "3")), KubeOptions(image=IMAGE, name="train-3", namespace="ml")),
    "chief+workers+ps": (job(workers=2, strategy="parameter-server", ps=2), KubeOptions(image=IMAGE, name="train-ps")),
    "gpu": (job(workers=2, max_restarts=3), KubeOptions(image=IMAGE, name="train-gpu", accelerator="nvidia-l4", gpus_per_worker=2)),
    "tpu v5e 2x4": (job(), KubeOptions(image=IMAGE, name="train-v5e", accelerator="tpu-v5-lite-podslice", topology="2x4")),
    "tpu v5e 2x4 on 2 hosts": (
        job(),
        KubeOptions(image=IMAGE, name="train-v5e2", accelerator="tpu-v5-lite-podslice", topology="2x4", chips_per_host=4),
    ),
    "tpu v4 2x2x4": (job(max_restarts=2), KubeOptions(image=IMAGE, name="train-v4", accelerator="tpu-v4-podslice", topology="2x2x4")),
    # TPUs named the way `tpuctl create` takes them: the table maps them to GKE's label and topology.
    "tpu v4-8": (job(), KubeOptions(image=IMAGE, name="train-v4-8", accelerator="v4-8")),
    "tpu v5litepod-16": (job(), KubeOptions(image=IMAGE, name="train-v5e-16", accelerator="v5litepod-16")),
    "tpu v6e-8": (job(), KubeOptions(image=IMAGE, name="train-v6e-8", accelerator="v6e-8")),
    "tpu v5p-32 2x4x2": (job(), KubeOptions(image=IMAGE, name="train-v5p", accelerator="v5p-32", topology="2x4x2")),
    # Keras 3 on JAX: a JobSet on every kind of node.
    "jax 3 cpu pods": (job(framework="jax", workers=3), KubeOptions(image=IMAGE, name="keras-jax", namespace="ml")),
    "jax gpu": (job(framework="jax", workers=2, max_restarts=1), KubeOptions(image=IMAGE, name="keras-jax-gpu", accelerator="nvidia-l4", gpus_per_worker=2)),
    "jax tpu v5litepod-16": (job(framework="jax"), KubeOptions(image=IMAGE, name="keras-jax-tpu", accelerator="v5litepod-16")),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_validates_against_the_crd_and_core_schemas(shape: str) -> None:
    manifest = render(*SHAPES[shape])
    data = load(manifest)
    assert_valid(data)
    assert data["metadata"]["name"] == manifest.name
    for container in containers(data).values():
        env = env_of(container)
        assert "TF_CONFIG" not in env, "TF_CONFIG is the operator's (TFJob) or not needed (TPU)"
        assert "TPUCTL_ATTEMPT" not in env
        assert env["TPUCTL_RUN_ID"] == manifest.name
        assert env["PYTHONUNBUFFERED"] == "1"
        assert container["name"] == "tensorflow"
        for quantities in (container.get("resources") or {}).values():
            assert all(isinstance(v, str) for v in quantities.values()), quantities


def test_one_worker_is_a_tfjob_with_one_worker_replica() -> None:
    data = load(render(*SHAPES["1 worker"]))
    assert (data["apiVersion"], data["kind"]) == ("kubeflow.org/v1", "TFJob")
    (worker,) = data["spec"]["tfReplicaSpecs"].values()
    assert list(data["spec"]["tfReplicaSpecs"]) == ["Worker"]
    assert worker["replicas"] == 1
    assert worker["restartPolicy"] == "Never"
    assert data["spec"]["successPolicy"] == "AllWorkers"
    assert data["spec"]["runPolicy"] == {"cleanPodPolicy": "Running"}
    assert worker["template"]["spec"]["containers"][0]["command"] == ["python", "-m", "tpuctl.runtime", "train.py"]


def test_n_workers_share_one_template_and_read_their_index_from_the_pod() -> None:
    manifest = render(*SHAPES["3 workers"])
    data = load(manifest)
    assert data["metadata"]["namespace"] == "ml"
    worker = data["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    container = worker["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "tpuctl.runtime", "train.py", "--epochs", "3"]
    env = env_of(container)
    assert env["TPUCTL_NUM_WORKERS"] == "3"
    assert env["TPUCTL_TASK_TYPE"] == "worker"
    assert env["TPUCTL_WORKER_INDEX"] == {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}}
    assert container["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert manifest.workers == ("worker:0", "worker:1", "worker:2")


def test_parameter_server_training_has_chief_workers_and_ps() -> None:
    data = load(render(*SHAPES["chief+workers+ps"]))
    specs = data["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Chief", "Worker", "PS"]
    assert [specs[t]["replicas"] for t in specs] == [1, 2, 2]
    assert "successPolicy" not in data["spec"], "the chief's success is the job's"
    for replica_type, role in (("Chief", "chief"), ("Worker", "worker"), ("PS", "ps")):
        env = env_of(specs[replica_type]["template"]["spec"]["containers"][0])
        assert env["TPUCTL_TASK_TYPE"] == role
        assert env["TPUCTL_STRATEGY"] == "parameter-server"


def test_gpu_workers_ask_for_gpus_on_matching_nodes() -> None:
    data = load(render(*SHAPES["gpu"]))
    worker = data["spec"]["tfReplicaSpecs"]["Worker"]
    spec = worker["template"]["spec"]
    assert spec["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert worker["restartPolicy"] == "OnFailure"
    assert data["spec"]["runPolicy"]["backoffLimit"] == 3


def test_parameter_servers_get_no_gpus() -> None:
    data = load(render(job(workers=1, strategy="parameter-server", ps=1), KubeOptions(image=IMAGE, name="x", gpus_per_worker=1)))
    specs = data["spec"]["tfReplicaSpecs"]
    assert "resources" not in specs["PS"]["template"]["spec"]["containers"][0]
    assert specs["Chief"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


@pytest.mark.parametrize(
    ("shape", "hosts", "chips", "topology", "accelerator"),
    [
        ("tpu v5e 2x4", 1, "8", "2x4", "tpu-v5-lite-podslice"),
        ("tpu v5e 2x4 on 2 hosts", 2, "4", "2x4", "tpu-v5-lite-podslice"),
        ("tpu v4 2x2x4", 4, "4", "2x2x4", "tpu-v4-podslice"),
        ("tpu v4-8", 1, "4", "2x2x1", "tpu-v4-podslice"),
        ("tpu v5litepod-16", 4, "4", "4x4", "tpu-v5-lite-podslice"),
        ("tpu v6e-8", 1, "8", "2x4", "tpu-v6e-slice"),
        ("tpu v5p-32 2x4x2", 4, "4", "2x4x2", "tpu-v5p-slice"),
    ],
)
def test_a_tpu_slice_is_a_jobset_with_one_pod_per_host(shape: str, hosts: int, chips: str, topology: str, accelerator: str) -> None:
    manifest = render(*SHAPES[shape])
    data = load(manifest)
    assert (data["apiVersion"], data["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    (replicated,) = data["spec"]["replicatedJobs"]
    assert replicated["replicas"] == 1
    job_spec = replicated["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"], job_spec["completionMode"]) == (hosts, hosts, "Indexed")
    assert job_spec["backoffLimit"] == 0
    pod = job_spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": accelerator, "cloud.google.com/gke-tpu-topology": topology}
    container = pod["containers"][0]
    assert container["resources"] == {"requests": {"google.com/tpu": chips}, "limits": {"google.com/tpu": chips}}
    env = env_of(container)
    assert env["TPUCTL_STRATEGY"] == "tpu"
    assert env["TPUCTL_NUM_WORKERS"] == str(hosts)
    assert env["TPUCTL_WORKER_INDEX"] == {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert data["metadata"]["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
    assert manifest.workers == tuple(f"worker:{i}" for i in range(hosts))
    assert manifest.tpu is not None and manifest.tpu.hosts == hosts


@pytest.mark.parametrize(
    ("type_name", "label", "topology", "chips_per_host"),
    [("v4-32", "tpu-v4-podslice", "2x2x4", None), ("v5litepod-8", "tpu-v5-lite-podslice", "2x4", 4), ("v5e-4", "tpu-v5-lite-podslice", "2x2", None)],
)
def test_a_type_name_renders_what_its_gke_label_and_topology_render(type_name: str, label: str, topology: str, chips_per_host: int | None) -> None:
    by_type = render(job(), KubeOptions(image=IMAGE, name="same", accelerator=type_name, chips_per_host=chips_per_host))
    by_label = render(job(), KubeOptions(image=IMAGE, name="same", accelerator=label, topology=topology, chips_per_host=chips_per_host))
    assert by_type.text == by_label.text and by_type.tpu == by_label.tpu


def test_max_restarts_restarts_the_whole_slice() -> None:
    data = load(render(*SHAPES["tpu v4 2x2x4"]))
    assert data["spec"]["failurePolicy"] == {"maxRestarts": 2}


# ---- TF_CONFIG as the TFJob operator writes it -------------------------------------------------


def test_documented_tf_config_is_the_operators_and_tpuctls_runtime_reads_it() -> None:
    manifest = render(*SHAPES["chief+workers+ps"])
    counts = {"chief": 1, "worker": 2, "ps": 2}
    expected = tfjob_tf_config("train-ps", "default", counts, "worker", 0)
    assert f"# worker:0 gets: {expected}\n" in manifest.text
    assert expected == (
        '{"cluster":{"chief":["train-ps-chief-0.default.svc:2222"],'
        '"ps":["train-ps-ps-0.default.svc:2222","train-ps-ps-1.default.svc:2222"],'
        '"worker":["train-ps-worker-0.default.svc:2222","train-ps-worker-1.default.svc:2222"]},'
        '"task":{"type":"worker","index":0},"environment":"cloud"}'
    )
    cluster, task = parse_tf_config(tfjob_tf_config("train-ps", "default", counts, "ps", 1))
    assert cluster.jobs["ps"][1] == "train-ps-ps-1.default.svc:2222"
    assert (task.type, task.index) == ("ps", 1)
    assert cluster.chief().type == "chief"


def test_the_jobset_says_why_it_has_no_tf_config() -> None:
    text = render(*SHAPES["tpu v4 2x2x4"]).text
    assert "No TF_CONFIG" in text and "TPU_WORKER_HOSTNAMES" in text
    assert "TF_CONFIG" not in json.dumps(load(render(*SHAPES["tpu v4 2x2x4"])))


# ---- Keras 3 on JAX ---------------------------------------------------------------------------

COMPLETION_INDEX = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


def pod_environ(container: dict[str, Any], index: int) -> dict[str, str]:
    """What the pod of completion index `index` sees: the downward API's fieldRefs resolved as Kubernetes resolves them."""
    return {name: str(index) if value == COMPLETION_INDEX else value for name, value in env_of(container).items()}


def test_a_jax_run_on_cpu_pods_is_a_jobset_whose_pods_are_told_their_cluster() -> None:
    manifest = render(*SHAPES["jax 3 cpu pods"])
    data = load(manifest)
    assert (data["apiVersion"], data["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert data["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    (replicated,) = data["spec"]["replicatedJobs"]
    spec = replicated["template"]["spec"]
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (3, 3, "Indexed")
    container = spec["template"]["spec"]["containers"][0]
    # Each pod's name under the JobSet's headless Service, as the CRD documents it:
    # <jobSet.name>-<spec.replicatedJob.name>-<job-index>-<pod-index>.<subdomain>, the subdomain defaulting to the JobSet's name.
    name = data["metadata"]["name"]
    port = container["ports"][0]["containerPort"]
    hosts = [f"{name}-{replicated['name']}-0-{i}.{name}:{port}" for i in range(3)]
    for index in range(3):
        environ = pod_environ(container, index)
        assert "TF_CONFIG" not in environ and "TPUCTL_STRATEGY" not in environ
        assert environ[jax_cluster.JOB_ADDRESSES] == ",".join(hosts)
        assert environ[jax_cluster.COORDINATOR_ADDRESS] == hosts[0]
        assert jax_cluster.COORDINATOR_BIND_ADDRESS not in environ  # a pod's coordinator answers the other pods
        assert environ["KERAS_BACKEND"] == "jax" and environ["TPUCTL_FRAMEWORK"] == "jax"
        assert jax_cluster.cluster_of(environ) == (hosts[0], 3, index)
        assert environ["TPUCTL_WORKER_INDEX"] == str(index)
    assert manifest.workers == ("worker:0", "worker:1", "worker:2")


def test_a_pods_process_id_is_a_field_ref_never_a_dependent_variable() -> None:
    """Kubernetes expands $(VAR) only from variables defined earlier in the same list, and the Job controller adds
    JOB_COMPLETION_INDEX after the template's own: a `$(JOB_COMPLETION_INDEX)` would reach the script unexpanded."""
    for shape in ("jax 3 cpu pods", "jax gpu"):
        container = containers(load(render(*SHAPES[shape])))["worker"]
        env = env_of(container)
        assert env[jax_cluster.PROCESS_ID] == COMPLETION_INDEX
        assert not [var for var in container["env"] if "$(" in str(var.get("value", ""))]


def test_a_jax_run_on_gpu_pods_asks_for_gpus_and_restarts_together() -> None:
    data = load(render(*SHAPES["jax gpu"]))
    pod = data["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert data["spec"]["failurePolicy"] == {"maxRestarts": 1}
    assert "annotations" not in data["metadata"]  # no TPU node pool to hold exclusively


def test_a_jax_run_on_a_tpu_slice_leaves_the_cluster_to_gke_and_jax() -> None:
    """GKE gives each pod TPU_WORKER_ID / TPU_WORKER_HOSTNAMES, which JAX's GkeTpuCluster reads: tpuctl writes none of
    its own cluster variables there (two descriptions of one slice could disagree), and builds no TPUStrategy."""
    manifest = render(*SHAPES["jax tpu v5litepod-16"])
    data = load(manifest)
    assert data["kind"] == "JobSet" and "network" not in data["spec"]
    spec = data["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert spec["parallelism"] == 4
    env = env_of(spec["template"]["spec"]["containers"][0])
    assert not set(env) & {*jax_cluster.WRITTEN, "TF_CONFIG", "TPUCTL_STRATEGY"}
    assert (env["TPUCTL_FRAMEWORK"], env["KERAS_BACKEND"], env["TPUCTL_NUM_WORKERS"]) == ("jax", "jax", "4")
    assert "TPU_WORKER_HOSTNAMES" in manifest.text and "TPUStrategy" not in manifest.text


def test_a_jax_dry_run_shows_the_cluster_variables() -> None:
    result = in_process(
        "launch", "train.py", "--backend", "kubernetes", "--framework", "jax", "--image", IMAGE, "--workers", "2", "--job-name", "kj", "--dry-run", "--json"
    )
    assert result.code == 0, result.err
    shown = json.loads(result.out)
    assert shown["kind"] == "JobSet" and shown["workers"] == ["worker:0", "worker:1"]
    data = yaml.safe_load(shown["manifest"])
    assert_valid(data)
    env = env_of(containers(data)["worker"])
    assert env[jax_cluster.NUM_PROCESSES] == "2" and env[jax_cluster.PROCESS_ID] == COMPLETION_INDEX
    assert env[jax_cluster.COORDINATOR_ADDRESS] == env[jax_cluster.JOB_ADDRESSES].split(",")[0]


# ---- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_job", "options", "message"),
    [
        (job(), KubeOptions(image=""), "--image"),
        (job(), KubeOptions(image="img with space"), "--image"),
        (job(), KubeOptions(image=IMAGE, namespace="Bad_NS"), "--namespace"),
        (job(), KubeOptions(image=IMAGE, name="UPPER"), "--job-name"),
        (job(), KubeOptions(image=IMAGE, name="x" * 41), "--job-name"),
        (job(), KubeOptions(image=IMAGE, name="9lives"), "--job-name"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v4-podslice"), "needs --topology"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v4-podslice", topology="2x4"), "3 dimensions"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v5-lite-podslice", topology="2x2x2"), "2 dimensions"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v5-lite-podslice", topology="4x4; rm"), "not a TPU topology"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v9-mystery", topology="2x2"), "unknown TPU type"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v5-lite-device", topology="4x4"), "single-host"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v5-lite-podslice", topology="2x4", chips_per_host=3), "whole number of hosts"),
        (job(workers=3), KubeOptions(image=IMAGE, accelerator="tpu-v4-podslice", topology="2x2x4"), "has 4 host(s)"),
        (job(strategy="mirrored"), KubeOptions(image=IMAGE, accelerator="tpu-v4-podslice", topology="2x2x1"), "TPUStrategy"),
        (job(), KubeOptions(image=IMAGE, accelerator="tpu-v4-podslice", topology="2x2x1", gpus_per_worker=1), "--gpus-per-worker"),
        (job(strategy="tpu"), KubeOptions(image=IMAGE), "--strategy tpu"),
        (job(), KubeOptions(image=IMAGE, topology="2x4"), "--topology"),
        (job(), KubeOptions(image=IMAGE, accelerator="amd-mi300"), "expected a TPU"),
        (job(), KubeOptions(image=IMAGE, accelerator="v4-8x"), "expected a TPU"),
        (job(), KubeOptions(image=IMAGE, accelerator="v3-8"), "GKE has no v3"),
        (job(), KubeOptions(image=IMAGE, accelerator="v9-8"), "unknown TPU generation"),
        (job(), KubeOptions(image=IMAGE, accelerator="v4-8", topology="2x2x2"), "v4-8 has 4"),
        (job(), KubeOptions(image=IMAGE, accelerator="v4-24"), "no default topology"),
        (job(workers=2), KubeOptions(image=IMAGE, accelerator="v5litepod-16"), "has 4 host(s)"),
    ],
)
def test_bad_options_are_refused_with_one_message(the_job: Job, options: KubeOptions, message: str) -> None:
    with pytest.raises(TpuctlError) as caught:
        render(the_job, options)
    assert message in str(caught.value)


def test_unknown_tpu_types_work_with_an_explicit_host_shape() -> None:
    tpu = gke_slice("tpu-v9-mystery", "4x4", chips_per_host=4)
    assert (tpu.chips, tpu.hosts, tpu.chips_per_host) == (16, 4, 4)


def test_a_default_name_is_a_valid_dns_label() -> None:
    for script in ("train.py", "9.py", "My Script!.py", "-.py", "a" * 80 + ".py"):
        name = render(Job(script=script, python="python"), KubeOptions(image=IMAGE)).name
        assert check_name(name) == name


# ---- hostile input --------------------------------------------------------------------------

HOSTILE = [
    "a\nb: c",
    "key: value",
    "- item",
    '"quoted"',
    "'single'",
    "# not a comment",
    "{{ jinja }}",
    "{% raw %}",
    "---",
    "...",
    "&anchor *alias",
    "!!python/object:os.system",
    "\\backslash\\",
    "tab\there",
    "cr\rlf\r\n",
    "nul\x00byte",
    "bell\x07del\x7f",
    "nel\x85ls\u2028ps\u2029",
    "\ufeffbom",
    "unicode: caf\u00e9 \u65e5\u672c \U0001f600",
    "yes",
    "no",
    "on",
    "~",
    "null",
    "0x1F",
    "1e3",
    "012",
    "true",
    " leading and trailing ",
    "",
]


def test_every_template_value_goes_through_a_yaml_or_comment_filter() -> None:
    for template in MANIFESTS.glob("*.j2"):
        for expression in re.findall(r"{{(.*?)}}", template.read_text(encoding="utf-8")):
            assert re.search(r"\|\s*(yaml|comment)\s*$", expression), f"{template.name}: {{{{{expression}}}}} is not escaped"


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_args_and_env_come_back_verbatim(value: str) -> None:
    the_job = job(workers=2, args=(value, "--flag=" + value), env=(("USER_VALUE", value),), model_dir=value or None)
    data = load(render(the_job, KubeOptions(image=IMAGE, name="hostile")))
    assert_valid(data)
    container = data["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"][4:] == [value, "--flag=" + value]
    env = env_of(container)
    assert env["USER_VALUE"] == value
    if value:
        assert env["TPUCTL_MODEL_DIR"] == value


_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_label = st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
# Printable, no spaces: what an image reference may contain, quotes, `#`, `: ` and braces included.
_image = st.text(st.characters(exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp", "Cf", "Co", "Cn")), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=_label,
    namespace=_label,
    image=_image,
    script=_text,
    args=st.lists(_text, max_size=4),
    env=st.lists(st.tuples(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), _text), max_size=3, unique_by=lambda kv: kv[0]),
    tpu=st.booleans(),
)
def test_no_input_can_add_structure(name: str, namespace: str, image: str, script: str, args: list[str], env: list[tuple[str, str]], tpu: bool) -> None:
    env = [(k, v) for k, v in env if not k.startswith("TPUCTL_") and k != "TF_CONFIG"]
    options = KubeOptions(
        image=image,
        namespace=namespace,
        name=name,
        accelerator="tpu-v5-lite-podslice" if tpu else None,
        topology="4x4" if tpu else None,
    )
    manifest = render(Job(script=script, args=tuple(args), env=tuple(env), python="python"), options)
    data = load(manifest)
    assert kube_schemas.crd_errors(data) == []
    assert data["metadata"]["name"] == name and data["metadata"]["namespace"] == namespace
    (container,) = containers(data).values()
    assert container["image"] == image
    assert container["command"] == ["python", "-m", "tpuctl.runtime", script, *args]
    values = env_of(container)
    assert [values[k] for k, _ in env] == [v for _, v in env]
    assert set(values) - {k for k, _ in env} == {v for v in values if v.startswith("TPUCTL_")} | {"PYTHONUNBUFFERED"}
    assert manifest.text.isascii()


def test_hostile_names_are_refused_not_rendered() -> None:
    for name in ("a\nb", "a: b", "x#y", "{{x}}", "a b", "a.b", "-a", "a-", "a\u2028b", "caf\u00e9"):
        with pytest.raises(TpuctlError):
            render(job(), KubeOptions(image=IMAGE, name=name))
        with pytest.raises(TpuctlError):
            render(job(), KubeOptions(image=IMAGE, namespace=name))


# ---- the YAML writer itself -----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(_text)
def test_a_quoted_scalar_reads_back_as_itself(text: str) -> None:
    quoted = k8s_yaml.quote(text)
    assert quoted.isascii() and "\n" not in quoted
    assert yaml.safe_load(f"key: {quoted}\n") == {"key": text}
    assert yaml.safe_load(f"- {quoted}\n- next\n") == [text, "next"]


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | _text, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=10))
def test_a_flow_node_reads_back_as_itself(value: object) -> None:
    assert yaml.safe_load(f"key: {k8s_yaml.flow(value)}\n") == {"key": value}


def test_a_lone_surrogate_is_refused_in_one_line() -> None:
    with pytest.raises(TpuctlError, match="not valid Unicode"):
        render(job(args=("bad\udcff",)), KubeOptions(image=IMAGE, name="x"))


def test_comments_are_one_printable_line() -> None:
    assert k8s_yaml.comment("a\nb\u2028c\x85") == "a\\nb\\u2028c\\x85"


# ---- through the CLI ------------------------------------------------------------------------
# In this process through the real entry point (test_hostile_cli.in_process): what is checked is what a command prints
# and the status it ends with.

EXAMPLE = str(ROOT / "examples" / "train_keras.py")


def test_dry_run_prints_the_yaml_and_nothing_else() -> None:
    result = in_process(
        "launch", "train.py", "--backend", "kubernetes", "--image", IMAGE, "--job-name", "demo", "--workers", "2", "--dry-run", "--", "--epochs", "3"
    )
    assert result.code == 0, result.err
    assert result.err == ""
    data = yaml.safe_load(result.out)
    assert_valid(data)
    container = data["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "tpuctl.runtime", "train.py", "--epochs", "3"]


def test_the_tpu_options_reach_the_jobset() -> None:
    result = in_process(
        "launch", "train.py", "--backend", "kubernetes", "--image", IMAGE, "--accelerator", "tpu-v5-lite-podslice",
        "--topology", "2x4", "--tpu-chips-per-host", "4", "--namespace", "tpu", "--dry-run",
    )  # fmt: skip
    assert result.code == 0, result.err
    data = yaml.safe_load(result.out)
    assert_valid(data)
    assert data["metadata"]["namespace"] == "tpu"
    assert data["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2


def test_a_tpu_named_as_create_takes_it_reaches_the_jobset() -> None:
    result = in_process("launch", "train.py", "--backend", "kubernetes", "--image", IMAGE, "--accelerator", "v4-16", "--dry-run")
    assert result.code == 0, result.err
    data = yaml.safe_load(result.out)
    assert_valid(data)
    pod = data["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert pod["parallelism"] == 2
    assert pod["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice", "cloud.google.com/gke-tpu-topology": "2x2x2"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--image", IMAGE], "--image is for --backend kubernetes"),
        (["--topology", "2x4"], "--topology is for --backend kubernetes"),
        (["--backend", "kubernetes"], "needs --image IMAGE"),
        (["--backend", "kubernetes", "--image", IMAGE, "--start-timeout", "5"], "--start-timeout is for local and ssh"),
        (["--backend", "kubernetes", "--image", IMAGE, "--hang-timeout", "60"], "--hang-timeout is for local and ssh"),
        (["--backend", "kubernetes", "--image", IMAGE, "--max-preemptions", "3"], "--max-preemptions is for local and ssh"),
        (["--backend", "kubernetes", "--image", IMAGE, "--job-name", "Bad"], "--job-name 'Bad'"),
        (["--backend", "kubernetes", "--image", IMAGE, "--accelerator", "v2-8"], "GKE has no v2"),
    ],
)
def test_cli_refusals_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = in_process("launch", EXAMPLE, *args, "--dry-run")
    assert result.code == 2, result.err
    assert message in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


def test_the_dry_run_examples_in_the_docs_are_current() -> None:
    from tpuctl import __version__

    text = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    examples = re.findall(r"<!-- dry-run: (.*?) -->\n```yaml\n(.*?)```", text, re.DOTALL)
    assert len(examples) == 3
    for args, shown in examples:
        result = in_process("launch", *shlex.split(args))
        assert result.code == 0, result.err
        assert result.out == shown.replace("tpuctl VERSION", f"tpuctl {__version__}"), f"docs/kubernetes.md is stale for: {args}"


def test_the_manifests_ship_in_the_wheel() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = project["tool"]["setuptools"]["package-data"]["tpuctl"]
    shipped = {p.relative_to(ROOT / "tpuctl").as_posix() for p in MANIFESTS.glob("*.j2")}
    assert shipped and all(any(Path(name).match(pattern) for pattern in patterns) for name in shipped), patterns
