"""Deployment artefacts: the config JSON Schema, the Helm chart, the Dockerfile."""
