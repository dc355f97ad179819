# syntax=docker/dockerfile:1
# Multi-stage: dependencies are installed before the source, so code changes reuse that layer.
FROM python:3.11-slim AS build
RUN python -m venv /opt/venv
WORKDIR /src
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml','rb'))['project']['dependencies']))" > requirements.txt \
 && /opt/venv/bin/pip install --no-cache-dir -r requirements.txt
COPY sidecar ./sidecar
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps .

FROM python:3.11-slim
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=3s CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:9090/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["webhook-sidecar"]
CMD ["run", "--config", "/etc/webhook-sidecar/config.yaml"]
