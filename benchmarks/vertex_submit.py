"""Wall time to submit a Vertex AI CustomJob, as a ratio against gcloud timed in the same process.

Both commands talk to the local stand-in of the Vertex AI v1 API (tests/standins/vertex_api.py),
started here, which sleeps 50 ms before answering every request, and both leave the job running:

    subject  tpuctl launch examples/train_tpu.py --backend vertex --image IMAGE --accelerator v2-8 --detach --json
    anchor   gcloud ai custom-jobs create --region us-central1 --display-name NAME --config job.json
             (job.json: the same CustomJobSpec tpuctl sends, from its own --dry-run --json; a private
             CLOUDSDK_CONFIG with api_endpoint_overrides/aiplatform set to the stand-in,
             --access-token-file; skipped, with a note, when gcloud is missing)

Target: subject <= 0.5x the anchor. tpuctl talks REST through google-auth's AuthorizedSession
instead of loading a Vertex client library; this is where that choice shows.

A side's time runs until its command returned and the stand-in holds the job: a detached launch
returns once its run holds its folder and submits from its own process, so its exit alone would
time less than the submission; each detached run is stopped after it is timed (`tpuctl stop`).

Each side runs once untimed (a warm-up, and a check that a job was created with the expected
machine spec; with --no-warm-up, as --smoke has it, that checked run is the side's first timed
one), then the runs alternate in a rotating order and medians are reported. A
measurement, not a test: it exits 0 even when the target is missed.

    .venv/bin/python benchmarks/vertex_submit.py [--runs N] [--no-warm-up]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_args  # benchmarks/smoke.py, beside this script
from tpuctl_cli import tpuctl_command  # benchmarks/tpuctl_cli.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.standins.fixtures import standin_env  # noqa: E402
from tests.standins.gcloud import Gcloud  # noqa: E402
from tests.standins.google_apis import GoogleStandin  # noqa: E402
from tests.standins.vertex_api import JobScript  # noqa: E402

REGION = "us-central1"
IMAGE = "us-docker.pkg.dev/bench/train/tf:2.21"
LATENCY_S = 0.05
TARGET = 0.5
RUN_TIMEOUT_S = 120
MACHINE = {"machineType": "cloud-tpu", "acceleratorType": "TPU_V2", "acceleratorCount": 8}


def run_once(argv: list[str], env: dict[str, str], g: GoogleStandin) -> tuple[float, str]:
    """Seconds until the command returned AND the stand-in holds its CustomJob, and the command's stdout.

    A detached launch returns once its run holds its folder and submits from its own process after that, so the
    command's exit alone would time less than the submission.
    """
    before = len(g.vertex.created_bodies)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=RUN_TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"benchmark command failed with status {done.returncode}: {' '.join(argv)}\n{done.stderr[-2000:]}")
    deadline = start + RUN_TIMEOUT_S
    while len(g.vertex.created_bodies) == before and time.perf_counter() < deadline:
        time.sleep(0.002)
    return time.perf_counter() - start, done.stdout


def stop_detached(stdout: str, env: dict[str, str]) -> None:
    """End a detached run's follower (and cancel its job) so that none outlives the benchmark."""
    run_id = json.loads(stdout)["run_id"]
    subprocess.run([*tpuctl_command(), "stop", run_id], capture_output=True, text=True, env=env, check=False, timeout=RUN_TIMEOUT_S)


def created_one(g: GoogleStandin, before: int, name: str) -> None:
    """Each run must have created exactly one job, with the v2-8's machine spec."""
    bodies = g.vertex.created_bodies[before:]
    if len(bodies) != 1 or bodies[0]["jobSpec"]["workerPoolSpecs"][0]["machineSpec"] != MACHINE:
        raise SystemExit(f"{name}: expected one CustomJob with {MACHINE}, the stand-in got {bodies}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument(
        "--warm-up", action=argparse.BooleanOptionalAction, default=True, help="an untimed checked run of each side first (default: on)"
    )
    args = parse_args(parser, runs=1, warm_up=False)
    gcloud = shutil.which("gcloud")
    with GoogleStandin(project="tpuctl-bench") as g, tempfile.TemporaryDirectory() as tmp:
        g.faults.latency_s = LATENCY_S
        env = standin_env(g, Path(tmp)) | {"TPUCTL_VERTEX_ENDPOINT": g.url, "TPUCTL_LOGGING_ENDPOINT": g.url}
        subject = [
            *tpuctl_command(), "launch", str(ROOT / "examples" / "train_tpu.py"), "--backend", "vertex", "--image", IMAGE,
            "--accelerator", "v2-8", "--region", REGION, "--detach", "--json",
        ]
        commands = {"tpuctl launch --backend vertex --detach": (subject, env)}
        if gcloud is None:
            print("note: gcloud is not installed; only tpuctl is timed, no ratio")
        else:
            body = json.loads(subprocess.run([*subject, "--dry-run"], capture_output=True, text=True, env=env, check=True).stdout)
            config = Path(tmp) / "job.json"
            config.write_text(json.dumps(body["jobSpec"]))
            anchor_cli = Gcloud(g, Path(tmp) / "gcloud", ["aiplatform"])
            anchor = [
                gcloud, "ai", "custom-jobs", "create", "--region", REGION, "--display-name", "bench", "--config", str(config),
                "--format=json", *anchor_cli.flags,
            ]
            commands["gcloud ai custom-jobs create"] = (anchor, anchor_cli.env)
        def timed(name: str) -> float:
            g.vertex.next_script(JobScript(states=[("JOB_STATE_QUEUED", 3600.0)]))
            argv, cmd_env = commands[name]
            if argv is subject:  # one launch per log dir: a folder holds one launch
                argv = [*argv, "--log-dir", str(Path(tmp) / f"logs-{len(g.vertex.created_bodies)}")]
            seconds, stdout = run_once(argv, cmd_env, g)
            if argv[: len(subject)] == subject:
                stop_detached(stdout, cmd_env)
            return seconds

        times: dict[str, list[float]] = {name: [] for name in commands}
        for name in commands:
            before = len(g.vertex.created_bodies)
            seconds = timed(name)
            created_one(g, before, name)
            if not args.warm_up:
                times[name].append(seconds)
        names = list(commands)
        for round_no in range(args.runs if args.warm_up else args.runs - 1):
            for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
                times[name].append(timed(name))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"{name:34} median {median:.3f} s over {len(times[name])} runs")
    if len(medians) == 2:
        ratio = medians[names[0]] / medians[names[1]]
        print(f"ratio tpuctl/gcloud {ratio:.2f}x (target <= {TARGET}x): {'PASS' if ratio <= TARGET else 'MISS'}")


if __name__ == "__main__":
    main()
