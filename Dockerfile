# webhook-sidecar image: multi-stage, small, non-root, read-only-root friendly. Dependencies are
# installed from the hash-locked requirements.lock before the source is copied, so a code
# change reuses the dependency layer. No `# syntax=` line: the builder's built-in Dockerfile
# frontend is used, so an air-gapped BuildKit never fetches one.
#   docker build -t webhook-sidecar \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#   docker run --read-only --tmpfs /tmp -v webhook-sidecar-data:/var/lib/webhook-sidecar \
#     -v "$PWD/config.yaml:/etc/webhook-sidecar/config/config.yaml:ro" webhook-sidecar
# Multi-arch builds (docker buildx --platform linux/amd64,linux/arm64), the build arguments and
# the container test (scripts/container-test): docs/container.md.

# Both stages use the same base image: the virtualenv built in the first is copied as is.
# Override only with an equivalent image (Python 3.11 as `python`, with venv).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# --build-arg WEBHOOK_SIDECAR_COMPILE=1 compiles the package with mypyc (docs/design.md,
# "Compiled modules"): a C compiler here only, the final stage gets the built virtualenv.
# Pure Python by default (no compiler needed); 1 compiles the core and the delivery pipeline
# with mypyc, as docs/design.md "Compiled modules" says (the suite passes on both builds).
ARG WEBHOOK_SIDECAR_COMPILE=0
# The compiler is the base image's Debian release's (this stage is thrown away).
# hadolint ignore=DL3008
RUN if [ "$WEBHOOK_SIDECAR_COMPILE" != 0 ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends gcc libc6-dev \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && python -m venv /opt/venv
WORKDIR /src
# 1. Runtime dependencies only, every file checked against requirements.lock's hashes (no
#    source yet; --no-deps: nothing outside the lock is installed).
COPY requirements.lock ./
RUN /opt/venv/bin/pip install --require-hashes --no-deps -r requirements.lock
# 2. The package itself, without touching the dependencies (installs the console script);
#    compiled, its build fetches the lint's mypy (buildtools/backend.py). --version says
#    which build it is; the check fails the build if it is not the one asked for.
COPY pyproject.toml README.md setup.py MANIFEST.in ./
COPY buildtools ./buildtools
COPY sidecar ./sidecar
RUN /opt/venv/bin/pip install --no-deps . \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/webhook-sidecar --version \
 && /opt/venv/bin/python -c "import os, sys, sidecar.compiled as c; \
sys.exit(c.compiled() != (os.environ['WEBHOOK_SIDECAR_COMPILE'] != '0'))"

FROM ${BASE_IMAGE}
# OCI annotations: pass the release's version, the commit and the repository when building.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/webhook-sidecar/webhook-sidecar
LABEL org.opencontainers.image.title="webhook-sidecar" \
      org.opencontainers.image.description="A verifying, deduplicating reverse proxy for inbound webhooks" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
COPY --from=build /opt/venv /opt/venv
# A writable home for the embedded SQLite store; everything else can be read-only.
RUN install -d -o 10001 -g 10001 -m 0750 /var/lib/webhook-sidecar
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    WEBHOOK_SIDECAR_CONFIG=/etc/webhook-sidecar/config/config.yaml \
    WEBHOOK_SIDECAR_HEALTHCHECK_URL=http://127.0.0.1:9090/healthz
WORKDIR /var/lib/webhook-sidecar
USER 10001:10001
# 8080: `listen` (provider traffic); 9090: `admin_listen` (/healthz, /readyz, /metrics).
EXPOSE 8080 9090
# Liveness on the admin listener (the config's admin_listen; set the URL if you change it).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; sys.exit(0 if urllib.request.urlopen(os.environ['WEBHOOK_SIDECAR_HEALTHCHECK_URL'], timeout=2).status == 200 else 1)"]
ENTRYPOINT ["webhook-sidecar"]
# The config file comes from $WEBHOOK_SIDECAR_CONFIG; any other command works too
# (docker run IMAGE check-config, migrate, events list …).
CMD ["run"]
