"""The app-side verifiers in ``examples/verify/`` (shown in docs/app-side.md), each run as a
subprocess in its own language against real forwards signed by the proxy — a GitHub delivery
whose body is not UTF-8 and a Stripe one — and against what someone reaching the app directly
could send: a changed body, another secret, a stale signature, missing or malformed headers.

Each language reads a list of cases (body, headers) as JSON on stdin and prints a JSON list of
verdicts, so one process per language checks every case. Python and Node always run (Node: a
failure under CI=true); Ruby, PHP and Go run where their interpreter/toolchain is installed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from sidecar.core.signing.forward import decode_forward_secret, forward_signature
from tests.acceptance.conftest import deploy
from tests.support import GITHUB_SECRET, REPO, post, stripe_event, stripe_headers

EXAMPLES = REPO / "examples" / "verify"
APP_SIDE_DOC = REPO / "docs" / "app-side.md"
SIGNED = ("webhook-id", "webhook-timestamp", "webhook-signature")
NOT_UTF8 = b"\xff\xfe binary \x80\x81 payload \xc3\x28 \x00 end"

Headers = dict[str, str]


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


@dataclass(frozen=True)
class Case:
    name: str
    secret: str
    body: bytes
    headers: Headers
    valid: bool


@dataclass(frozen=True)
class Forwards:
    """What the proxy forwarded to the app, and the secret it signed with."""
    secret: str
    binary: tuple[bytes, Headers]
    json: tuple[bytes, Headers]


@pytest.fixture
async def forwards(tmp_path: Path) -> AsyncIterator[Forwards]:
    """A real proxy (subprocess, SQLite) signing its forwards; one GitHub delivery of bytes that
    are not UTF-8 and one Stripe delivery, as the app received them."""
    secret = new_secret()
    async with deploy("sqlite", tmp_path, None) as dep:
        dep.config["upstream"]["signing_secrets"] = [secret]
        await dep.start(1)
        assert dep.client is not None
        signature = "sha256=" + hmac.new(GITHUB_SECRET.encode(), NOT_UTF8,
                                         hashlib.sha256).hexdigest()
        status, _, _ = await post(dep.client, dep.url(0, "/webhooks/github"), NOT_UTF8, {
            "X-Hub-Signature-256": signature, "X-GitHub-Delivery": "d7c1e0a2-binary",
            "Content-Type": "application/octet-stream"})
        assert status == 200
        body = stripe_event("evt_app_side", text="caf\u00e9")
        assert (await post(dep.client, dep.url(0, "/webhooks/stripe"), body,
                           stripe_headers(body)))[0] == 200
        binary, stripe = dep.stub.seen
        assert binary.body == NOT_UTF8 and stripe.body == body

        def signed(seen_headers: dict[str, str]) -> Headers:
            return {k.lower(): v for k, v in seen_headers.items() if k.lower() in SIGNED}

        yield Forwards(secret, (binary.body, signed(binary.headers)),
                       (stripe.body, signed(stripe.headers)))


def cases(fw: Forwards) -> list[Case]:
    body, headers = fw.binary
    key = decode_forward_secret(fw.secret, "test")
    stale = {**headers, **forward_signature([key], headers["webhook-id"], body,
                                            time.time() - 600)}
    future = {**headers, **forward_signature([key], headers["webhook-id"], body,
                                             time.time() + 600)}
    garbled = {**headers, "webhook-signature": "v1,!!not base64!! v2 ,",
               "webhook-timestamp": "\N{ARABIC-INDIC DIGIT ONE}" * 10}
    rotated = {**headers, "webhook-signature": "v1,bm90IG91cnM= " + headers["webhook-signature"]}
    return [
        Case("the forward of a non-UTF-8 body", fw.secret, body, headers, True),
        Case("a JSON forward", fw.secret, *fw.json, True),
        Case("one of several signatures (rotation)", fw.secret, body, rotated, True),
        Case("a byte added", fw.secret, body + b"!", headers, False),
        Case("a byte removed", fw.secret, body[:-1], headers, False),
        Case("the JSON body changed", fw.secret, fw.json[0].replace(b"caf", b"CAF"),
             fw.json[1], False),
        Case("another secret", new_secret(), body, headers, False),
        Case("ten minutes old", fw.secret, body, stale, False),
        Case("ten minutes ahead", fw.secret, body, future, False),
        Case("no signature headers", fw.secret, body, {}, False),
        Case("the id changed", fw.secret, body, {**headers, "webhook-id": "other"}, False),
        Case("garbled headers", fw.secret, body, garbled, False),
    ]


# --- one runner per language: the example file, unchanged, driven by a small harness ------

def need(tool: str, *, ci_required: bool = False) -> str:
    path = shutil.which(tool)
    if path is None:
        if ci_required and os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(f"{tool} is needed to run examples/verify")
        pytest.skip(f"{tool} is not installed")
    return path


PYTHON_HARNESS = """
import base64, json, runpy, sys
verify = runpy.run_path(sys.argv[1])["from_the_proxy"]
print(json.dumps([verify(base64.b64decode(c["body"]), c["headers"]) for c in json.load(sys.stdin)]))
"""

NODE_HARNESS = """
const { fromTheProxy } = require(process.argv[1]);
const cases = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
const verdicts = cases.map((c) => fromTheProxy(Buffer.from(c.body, "base64"), c.headers));
console.log(JSON.stringify(verdicts));
"""

RUBY_HARNESS = """
require "json"
require_relative ARGV[0]
cases = JSON.parse($stdin.read)
puts JSON.generate(cases.map { |c|
  h = c["headers"]
  from_the_proxy?(Base64.strict_decode64(c["body"]), h["webhook-id"], h["webhook-timestamp"],
                  h["webhook-signature"])
})
"""

PHP_HARNESS = """
require $argv[1];
$cases = json_decode(file_get_contents('php://stdin'), true);
echo json_encode(array_map(function ($c) {
    $h = $c['headers'];
    return from_the_proxy(base64_decode($c['body']), $h['webhook-id'] ?? null,
        $h['webhook-timestamp'] ?? null, $h['webhook-signature'] ?? null);
}, $cases)), "\\n";
"""

GO_HARNESS = """package webhooks

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
)

func TestCases(t *testing.T) {
	var cases []struct {
		Body    string            `json:"body"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		t.Fatal(err)
	}
	verdicts := []bool{}
	for _, c := range cases {
		body, _ := base64.StdEncoding.DecodeString(c.Body)
		header := http.Header{}
		for k, v := range c.Headers {
			header.Set(k, v)
		}
		verdicts = append(verdicts, FromTheProxy(body, header))
	}
	out, _ := json.Marshal(verdicts)
	fmt.Println("VERDICTS " + string(out))
}
"""


def run_python(secret: str, payload: str, tmp: Path) -> str:
    return run([sys.executable, "-c", PYTHON_HARNESS,
                str(EXAMPLES / "from_the_proxy.py")], secret, payload)


def run_node(secret: str, payload: str, tmp: Path) -> str:
    return run([need("node", ci_required=True), "-e", NODE_HARNESS,
                str(EXAMPLES / "from-the-proxy.js")], secret, payload)


def run_ruby(secret: str, payload: str, tmp: Path) -> str:
    return run([need("ruby"), "-e", RUBY_HARNESS, str(EXAMPLES / "from_the_proxy.rb")],
               secret, payload)


def run_php(secret: str, payload: str, tmp: Path) -> str:
    return run([need("php"), "-r", PHP_HARNESS, str(EXAMPLES / "from_the_proxy.php")],
               secret, payload)


def run_go(secret: str, payload: str, tmp: Path) -> str:
    go = need("go")
    module = tmp / "gomod"
    module.mkdir(exist_ok=True)
    (module / "go.mod").write_text("module example.com/webhooks\n\ngo 1.19\n")
    shutil.copy(EXAMPLES / "fromtheproxy.go", module / "fromtheproxy.go")
    (module / "harness_test.go").write_text(GO_HARNESS)
    out = run([go, "test", "-count=1", "-v", "./..."], secret, payload, cwd=module,
              extra_env={"GOFLAGS": "-mod=mod", "GOCACHE": str(tmp / "gocache")}, timeout=300)
    [line] = [ln for ln in out.splitlines() if ln.startswith("VERDICTS ")]
    return line.removeprefix("VERDICTS ")


def run(argv: list[str], secret: str, payload: str, *, cwd: Path | None = None,
        extra_env: dict[str, str] | None = None, timeout: float = 60) -> str:
    done = subprocess.run(argv, input=payload, capture_output=True, text=True, timeout=timeout,
                          check=False, cwd=cwd,
                          env={**os.environ, **(extra_env or {}),
                               "WEBHOOK_SIDECAR_SIGNING_SECRET": secret})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


RUNNERS: dict[str, Callable[[str, str, Path], str]] = {
    "python": run_python, "node": run_node, "ruby": run_ruby, "php": run_php, "go": run_go}


@pytest.mark.parametrize("language", list(RUNNERS))
async def test_the_example_accepts_the_proxys_forwards_and_nothing_else(
        language: str, forwards: Forwards, tmp_path: Path) -> None:
    all_cases = cases(forwards)
    verdicts: dict[str, bool] = {}
    # The key is read from the environment (as in an app): one process per secret.
    for secret in dict.fromkeys(c.secret for c in all_cases):
        mine = [c for c in all_cases if c.secret == secret]
        payload = json.dumps([{"body": base64.b64encode(c.body).decode(), "headers": c.headers}
                              for c in mine])
        answers = json.loads(RUNNERS[language](secret, payload, tmp_path))
        verdicts.update({c.name: answer for c, answer in zip(mine, answers, strict=True)})
    assert verdicts == {c.name: c.valid for c in all_cases}


async def test_the_python_library_cannot_verify_a_body_that_is_not_utf8(
        forwards: Forwards) -> None:
    """Why the docs give code rather than the ``standardwebhooks`` package: it decodes first."""
    body, headers = forwards.binary
    with pytest.raises(UnicodeDecodeError):
        Webhook(forwards.secret).verify(body, headers)
    Webhook(forwards.secret).verify(*forwards.json)  # and verifies a JSON forward


# --- the docs show the files as they are ----------------------------------------------------

FENCES = {"python": "from_the_proxy.py", "js": "from-the-proxy.js", "go": "fromtheproxy.go",
          "ruby": "from_the_proxy.rb", "php": "from_the_proxy.php"}


def test_the_docs_show_each_example_verbatim() -> None:
    doc = APP_SIDE_DOC.read_text(encoding="utf-8")
    for fence, name in FENCES.items():
        blocks = re.findall(rf"^```{fence}\n(.*?)^```$", doc, re.M | re.S)
        assert blocks == [(EXAMPLES / name).read_text(encoding="utf-8")], name
        assert f"examples/verify/{name}" in doc, name
