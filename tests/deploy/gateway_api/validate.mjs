// Validates Gateway API objects with @kubernetes-models/gateway-api (the v1 types' schemas,
// generated from sigs.k8s.io/gateway-api). stdin: a JSON list of manifests; stdout: a JSON
// list, one entry per manifest, null when valid, else the validator's message.
// The generated schemas keep the types' validation markers (patterns, enums, bounds, required
// fields) but not the CRD's CEL rules, and they do not reject unknown fields.
import { readFileSync } from "node:fs";
import * as v1 from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1";

const manifests = JSON.parse(readFileSync(0, "utf8"));
const results = manifests.map((manifest) => {
  if (manifest.apiVersion !== "gateway.networking.k8s.io/v1" || !(manifest.kind in v1)) {
    return `not a gateway.networking.k8s.io/v1 kind: ${manifest.apiVersion} ${manifest.kind}`;
  }
  try {
    new v1[manifest.kind](manifest).validate();
    return null;
  } catch (error) {
    return String(error.message ?? error);
  }
});
process.stdout.write(JSON.stringify(results));
