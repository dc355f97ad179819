"""The image, run the way the Helm chart runs it: the chart's standalone rendering gives the
config (ConfigMap), the environment (secret references), the user, the read-only root file
system and the writable mounts; the container gets exactly those, with ``--network host`` so it
reaches a tiny app on this machine's loopback. A signed GitHub delivery sent twice with
``webhook-sidecar send`` reaches the app once (the second is answered from the store), /readyz
and the image's HEALTHCHECK answer, and ``docker stop`` ends it gracefully: exit 0 and the
shutdown log lines. Every step prints how long it took.

Run by ``scripts/container-test`` (which starts an engine and builds the image); also runs
against any engine and image: SIDECAR_CONTAINER_TEST=1 SIDECAR_CONTAINER_IMAGE=TAG pytest -s
tests/container. The docker-compose.yaml quick start is validated here with ``docker-compose
config`` (its PostgreSQL image is not pulled).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "webhook-sidecar"
LABEL = "webhook-sidecar-container-test"

pytestmark = pytest.mark.timeout(420)


def step(name: str, started: float) -> None:
    print(f"[container-test]   {name:<52} {time.monotonic() - started:6.1f}s", flush=True)


def run(*args: str, timeout: float, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, probe: Any, timeout: float, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last:
                return last
        except (OSError, urllib.error.URLError, subprocess.SubprocessError) as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


class App:
    """The app behind the proxy: answers every POST 200 and records who asked."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        app = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                app.requests.append((self.path, dict(self.headers.items()), body))
                out = b'{"ok": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> App:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def render(values: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """The chart's config ConfigMap (files), the proxy container of its Deployment, and its
    pod spec."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values, name="ct", namespace="ct", is_install=True)
    docs = [d for path, text in sorted(out.items()) if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]
    [configmap] = [d for d in docs if d["kind"] == "ConfigMap"
                   and d["metadata"]["name"].endswith("-config")]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = [c for c in pod["containers"] if c["name"] == "webhook-sidecar"]
    return configmap["data"], container, pod


def docker_run_args(container: dict[str, Any], pod: dict[str, Any], config_dir: Path,
                    env: dict[str, str]) -> list[str]:
    """`docker run` flags for what the pod gives the container."""
    security = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    uid, gid = security["runAsUser"], security["runAsGroup"]
    args = ["--network", "host", "--user", f"{uid}:{gid}", "--pids-limit", "256",
            "--security-opt", "no-new-privileges"]
    if security.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    for capability in security.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", capability]
    memory = container.get("resources", {}).get("limits", {}).get("memory")
    if memory:
        args += ["--memory", memory.removesuffix("i").lower()]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            args += ["-v", f"{config_dir}:{mount['mountPath']}:ro"]
        elif "emptyDir" in volume:
            size = (volume["emptyDir"] or {}).get("sizeLimit", "64Mi")
            args += ["--tmpfs", f"{mount['mountPath']}:rw,nosuid,nodev,noexec,"
                     f"size={size.removesuffix('i').lower()},uid={uid},gid={gid},mode=0750"]
        else:
            raise AssertionError(f"volume kind not handled by this test: {volume}")
    for var in container["env"]:
        value = var.get("value", env.get(var["name"]))
        assert value is not None, f"no value for {var['name']}"
        args += ["-e", f"{var['name']}={value}"]
    return args


@pytest.fixture
def app() -> Iterator[App]:
    with App() as running:
        yield running


@pytest.fixture
def containers(docker: str) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        run(docker, "rm", "-f", name, timeout=60, check=False)


def log_events(logs: str) -> list[dict[str, Any]]:
    events = []
    for line in logs.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and "event" in record:
                events.append(record)
    return events


def test_the_image_runs_as_the_chart_runs_it(docker: str, image: str, app: App,
                                             containers: list[str], tmp_path: Path) -> None:
    t = time.monotonic()
    proxy_port, admin_port = free_port(), free_port()
    values = yaml.safe_load((CHART / "ci" / "standalone-values.yaml").read_text())
    values["standalone"]["upstreamUrl"] = f"http://127.0.0.1:{app.port}"
    values.setdefault("ports", {}).update(proxy=proxy_port, admin=admin_port)
    files, container, pod = render(values)
    config = yaml.safe_load(files["config.yaml"])
    assert config["providers"]["github"]["secrets"] == [{"env": "WEBHOOK_SIDECAR_SECRET_GITHUB_0"}]
    assert config["store"]["url"].startswith("sqlite:///"), "standalone, SQLite on the pod"
    # Every Secret the pod references gets a fresh value, in a form any of them accepts (a
    # Standard Webhooks secret: the forward-signing key needs it; the others take any string).
    env = {var["name"]: "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
           for var in container["env"]
           if "secretKeyRef" in var.get("valueFrom", {})}
    config_dir = tmp_path / "config"
    config_dir.mkdir(mode=0o755)
    config_dir.chmod(0o755)
    for file_name, text in files.items():
        (config_dir / file_name).write_text(text)
        (config_dir / file_name).chmod(0o644)
    name = f"webhook-sidecar-ct-{os.getpid()}-{secrets.token_hex(3)}"
    health_url = f"http://127.0.0.1:{admin_port}/healthz"
    flags = docker_run_args(container, pod, config_dir, env)
    assert "--read-only" in flags, "the chart runs the proxy on a read-only root file system"
    step("render the chart (standalone, github, SQLite)", t)

    t = time.monotonic()
    containers.append(name)
    run(docker, "run", "-d", "--name", name, "--label", f"{LABEL}=1", *flags,
        "-e", f"WEBHOOK_SIDECAR_HEALTHCHECK_URL={health_url}",
        "--health-interval", "1s", "--health-start-period", "20s",
        image, *container.get("args", []), timeout=60)
    ready_url = f"http://127.0.0.1:{admin_port}/readyz"

    def ready() -> bool:
        state = json.loads(run(docker, "inspect", "--format", "{{json .State}}", name,
                               timeout=30).stdout)
        assert state["Running"], f"the container stopped: {state}\n{logs_of(docker, name)}"
        with urllib.request.urlopen(ready_url, timeout=2) as answer:
            return bool(answer.status == 200)

    wait_for("/readyz answers 200", ready, timeout=60)
    step("start the container, /readyz 200", t)

    t = time.monotonic()
    health = wait_for("the image's HEALTHCHECK reports healthy", lambda: run(
        docker, "inspect", "--format", "{{.State.Health.Status}}", name, timeout=30,
    ).stdout.strip() == "healthy", timeout=60)
    assert health
    step("HEALTHCHECK healthy", t)

    t = time.monotonic()
    # Non-root, read-only root file system, the store's directory writable.
    probe = run(docker, "exec", name, "python", "-c", (
        "import errno, os, sys\n"
        "print(os.getuid(), os.getgid())\n"
        "for path in ('/opt/venv/probe', '/etc/probe'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "    except OSError as exc:\n"
        "        assert exc.errno == errno.EROFS, exc\n"
        "    else:\n"
        "        sys.exit(path + ' is writable')\n"
        "print(sorted(os.listdir('/var/lib/webhook-sidecar')))\n"), timeout=30)
    uid_line, files_line = probe.stdout.splitlines()
    uid = pod["securityContext"]["runAsUser"]
    assert uid_line.split() == [str(uid), str(pod["securityContext"]["runAsGroup"])]
    assert uid != 0
    assert "webhook-sidecar.db" in files_line, files_line
    step("non-root, read-only root, store on the tmpfs", t)

    t = time.monotonic()
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}))
    send = subprocess.run(
        [sys.executable, "-m", "sidecar", "send", "--config", str(config_dir / "config.yaml"),
         "--provider", "github", "--url", f"http://127.0.0.1:{proxy_port}/webhooks/github",
         "--file", str(payload), "--count", "2", "--timeout", "20"],
        capture_output=True, text=True, timeout=90, check=False, env={**os.environ, **env})
    assert send.returncode == 0, send.stdout + send.stderr
    assert "sent 2: 2 2xx, 0 other, 0 errors, 1 replays" in send.stdout, send.stdout
    [event_id] = re.findall(r"^event id: ([^,\s]+)", send.stdout, re.MULTILINE)
    assert len(app.requests) == 1, app.requests
    path, headers, body = app.requests[0]
    assert path == "/webhooks/github"
    assert body == payload.read_bytes()
    assert headers["Idempotency-Key"] == f"github:{event_id}"
    assert headers["X-Webhook-Sidecar-Attempt"] == "1"
    step("deliver one event twice: app saw it once", t)

    t = time.monotonic()
    grace = int(pod["terminationGracePeriodSeconds"])
    run(docker, "stop", "--time", str(grace), name, timeout=grace + 30)
    stopped = time.monotonic() - t
    state = json.loads(run(docker, "inspect", "--format", "{{json .State}}", name,
                           timeout=30).stdout)
    logs = logs_of(docker, name)
    events = [e["event"] for e in log_events(logs)]
    assert state["ExitCode"] == 0 and not state["OOMKilled"], (state, logs)
    assert stopped < grace, "exited by itself on SIGTERM, well before the kill"
    assert "listening" in events, logs
    assert events[-2:] == ["shutting_down", "stopped"], logs
    assert "shutdown_step_timed_out" not in events and "deliveries_cancelled" not in events
    step("docker stop: exit 0, shutting_down → stopped", t)


def logs_of(docker: str, name: str) -> str:
    result = run(docker, "logs", name, timeout=30, check=False)
    return result.stdout + result.stderr


def test_compose_file_validates() -> None:
    t = time.monotonic()
    compose = shutil.which("docker-compose")
    command = [compose] if compose else None
    if command is None and run("docker", "compose", "version", timeout=30,
                               check=False).returncode == 0:
        command = ["docker", "compose"]
    assert command, "docker-compose (Debian: apt-get install docker-compose) or docker compose"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}
    for file, store in (("docker-compose.yaml", "postgres"),
                        ("docker-compose.mariadb.yaml", "mariadb")):
        result = subprocess.run([*command, "-f", file, "config"],
                                capture_output=True, text=True, timeout=60, check=False,
                                env=env, cwd=REPO)
        assert result.returncode == 0, result.stdout + result.stderr
        resolved = yaml.safe_load(result.stdout)
        assert {"app", "proxy", store} <= set(resolved["services"]), file
    step(f"{Path(command[0]).name} config", t)


def test_compose_services_run_in_the_image(docker: str, image: str,
                                           containers: list[str]) -> None:
    """What docker-compose.yaml runs in the image, without PostgreSQL (no registry here): the
    proxy's config loads with the file's environment, and the stand-in app answers."""
    from tests.deploy.test_compose import SERVICES, config_mount

    t = time.monotonic()
    proxy = SERVICES["proxy"]
    source, target = config_mount(proxy)
    env = [f"-e{name}={value}" for name, value in proxy["environment"].items()]
    check = run(docker, "run", "--rm", "--network", "host", "--read-only",
                "--label", f"{LABEL}=1", "-v", f"{source}:{target}:ro", *env, image,
                "check-config", timeout=60)
    assert "store postgresql" in check.stdout, check.stdout
    step("compose: check-config with the proxy's environment", t)

    t = time.monotonic()
    app = SERVICES["app"]
    port = free_port()
    name = f"webhook-sidecar-ct-app-{os.getpid()}-{secrets.token_hex(3)}"
    containers.append(name)
    run(docker, "run", "-d", "--name", name, "--network", "host", "--read-only",
        "--label", f"{LABEL}=1", "-e", f"PORT={port}",
        "--entrypoint", app["entrypoint"][0], image, *app["entrypoint"][1:], *app["command"],
        timeout=60)

    def answered() -> bool:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/webhooks/stripe",
                                         data=b'{"id": "evt_1"}', method="POST",
                                         headers={"Idempotency-Key": "stripe:evt_1"})
        with urllib.request.urlopen(request, timeout=2) as answer:
            return bool(answer.status == 200)

    wait_for("the stand-in app answers", answered, timeout=30)
    assert "key=stripe:evt_1" in logs_of(docker, name)
    step("compose: the stand-in app answers in the image", t)
