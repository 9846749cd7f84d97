# syntax=docker/dockerfile:1
# Build a wheel, then install it into a slim runtime that runs as a non-root user.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mirror ./mirror
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="mirror" \
      org.opencontainers.image.description="Copy images from Docker Hub to Alibaba Cloud ACR, verified, and write Helm values" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin mirror
COPY config/mirror.yaml /etc/mirror/mirror.yaml
ENV MIRROR_CONFIG=/etc/mirror/mirror.yaml \
    MIRROR_OUTPUT_DIR=/var/lib/mirror/out \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/mirror
USER 10001
ENTRYPOINT ["mirror"]
CMD ["--help"]
