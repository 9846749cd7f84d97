# syntax=docker/dockerfile:1
# Build a wheel of mirror and its dependencies, then install them into a slim runtime that runs as a
# non-root user with a read-only root filesystem (state, output and temp files go to mounted volumes).
FROM python:3.11-slim-bookworm AS build
# postgres: several `mirror serve` replicas on one database; helm: Helm's Go SDK renders the chart to prove
# the values (x86_64 wheels only: build arm64 images with --build-arg EXTRAS=postgres,signatures,aliyun);
# signatures: sigstore-python checks cosign's keyless signatures before a copy
ARG EXTRAS=postgres,helm,signatures,aliyun
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mirror ./mirror
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[${EXTRAS}]"

FROM python:3.11-slim-bookworm
ARG VERSION=0.1.0
ARG EXTRAS=postgres,helm,signatures,aliyun
ARG SOURCE=""
LABEL org.opencontainers.image.title="mirror" \
      org.opencontainers.image.description="Copies images from Docker Hub to Alibaba Cloud ACR, verified, and writes HAMi's Helm values" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels "mirror[${EXTRAS}]==${VERSION}" \
    && rm -rf /wheels \
    && groupadd --gid 10001 mirror \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin mirror \
    && mkdir -p /var/lib/mirror \
    && chown 10001:10001 /var/lib/mirror
COPY config/mirror.yaml /etc/mirror/mirror.yaml
# MALLOC_ARENA_MAX: the spool's file threads each grew a glibc arena; two arenas took a 50-image, three-target
# run's peak RSS from 80 to 75 MB in the benchmark, at no cost in time
# output_dir and state_dir are not set here: the config's defaults (out, state) are relative to the WORKDIR,
# and a config that names its own (a mounted volume elsewhere) is not overridden by the image
ENV MIRROR_CONFIG=/etc/mirror/mirror.yaml \
    MALLOC_ARENA_MAX=2 \
    XDG_CACHE_HOME=/var/lib/mirror/cache \
    XDG_DATA_HOME=/var/lib/mirror/data \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/mirror
USER 10001:10001
# 8080: webhooks, the job API, the status page; 9090: /metrics and /readyz where service.internal_port sets it
EXPOSE 8080 9090
# Liveness and readiness come from Kubernetes probes (the heartbeat file's age, service.heartbeat_file; /readyz),
# not a HEALTHCHECK.
ENTRYPOINT ["mirror"]
CMD ["--help"]
