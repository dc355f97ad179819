"""docs/first-deploy.md followed literally (tests/deploy/first_deploy.py) with the image: step
1's `docker build` command, as the page prints it (plus the offline stand-in for the base image
and host networking, which this machine's engine needs), then the pod's init container
(`migrate`) and proxy container (`run`) in that image, as the chart runs them: its user, a
read-only root, the config and Secrets mounted where the pod mounts them. Step 7's delivery sent
twice through the containerised proxy reaches the app once.

Run by scripts/container-test, which sets SIDECAR_CONTAINER_BASE_IMAGE to the base it built."""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.container.test_image import docker_run_args, free_port, logs_of, run, wait_for
from tests.deploy.first_deploy import Cluster, PodFiles, role_and_database, shell
from tests.pgserver import find_or_start
from tests.support import StubApp

pytestmark = pytest.mark.timeout(600)


DOCKER = os.environ.get("DOCKER", "docker")


async def docker(*args: str, timeout: float = 120) -> str:
    proc = await asyncio.create_subprocess_exec(
        DOCKER, *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, (args, out.decode()[-2000:], err.decode()[-2000:])
    return out.decode()


@dataclass
class ImagePod:
    """The pod's containers in the image the page's build command made."""

    image: str = ""
    names: list[str] = field(default_factory=list)

    async def build(self, command: str, cwd: Path) -> None:
        base = os.environ["SIDECAR_CONTAINER_BASE_IMAGE"]
        assert command.startswith("docker build "), command
        await shell(command.replace("docker build ", f"{DOCKER} build --network host "
                                    f"--build-arg BASE_IMAGE={base} ", 1), cwd, timeout=900)
        argv = shlex.split(command)
        self.image = argv[argv.index("-t") + 1]

    def flags(self, files: PodFiles, container: str) -> list[str]:
        spec = files.spec
        [found] = [c for c in [*spec["initContainers"], *spec["containers"]]
                   if c["name"] == container]
        volumes = {v["name"]: v for v in spec["volumes"]}
        secret_mounts = [m for m in found["volumeMounts"] if "secret" in volumes[m["name"]]]
        plain = {**found, "volumeMounts": [m for m in found["volumeMounts"]
                                           if m not in secret_mounts]}
        args = docker_run_args(plain, spec, files.config.parent, files.env)
        for mount in secret_mounts:
            name = volumes[mount["name"]]["secret"]["secretName"]
            args += ["-v", f"{files.secrets / name}:{mount['mountPath']}:ro"]
        return args

    async def migrate(self, files: PodFiles) -> None:
        await docker("run", "--rm", *self.flags(files, "webhook-sidecar-migrate"), self.image,
                     "migrate")

    async def start(self, files: PodFiles) -> tuple[str, str]:
        listen, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        # Ports of its own on loopback (the engine's host network is this machine's).
        config = yaml.safe_load(files.config.read_text())
        config["listen"], config["admin_listen"] = listen, admin
        files.config.write_text(yaml.safe_dump(config))
        name = f"webhook-sidecar-fd-{secrets.token_hex(3)}"
        self.names.append(name)
        await docker("run", "-d", "--name", name, *self.flags(files, "webhook-sidecar"),
                     self.image, "run")

        def ready() -> bool:
            with urllib.request.urlopen(f"http://{admin}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)

        await asyncio.to_thread(wait_for, "/readyz answers 200", ready, 60)
        return listen, admin

    async def cli(self, argv: list[str], files: PodFiles) -> str:
        assert self.names, "kubectl exec before the pod started"
        return await docker("exec", self.names[-1], "webhook-sidecar", *argv)

    async def stop(self) -> None:
        for name in self.names:
            run(DOCKER, "rm", "-f", name, timeout=60, check=False)
        self.names.clear()


async def test_the_page_followed_literally_with_the_image(tmp_path: Path) -> None:
    server = find_or_start()
    app = await StubApp().start()
    pod = ImagePod()
    try:
        async with role_and_database(server.admin_dsn) as (names, _):
            cluster = Cluster(tmp_path, pod, names, app.url)
            try:
                await cluster.follow()
            except BaseException:
                for name in pod.names:
                    print(logs_of(DOCKER, name))
                raise
            send = next(out for out in cluster.outputs if "#2" in out)
            assert "#1 status=200" in send and "replay=true" in send, send
            assert app.count("evt_first_deploy_1") == 1
    finally:
        await pod.stop()
        await app.stop()
        server.close()
