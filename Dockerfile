# syntax=docker/dockerfile:1
#
# huddle: the group coordinator, as a small image that runs `huddle serve`.
#
#   docker build -t huddle .
#   docker run -d -p 9292:9292 huddle
#   docker run -d --network host huddle huddle serve --host 127.0.0.1 --port 9393
#
# BASE_IMAGE is any Debian-like image: python:3.11-slim (the default) already has Python;
# a bare Debian bookworm (as the container test builds locally) gets python3 from apt.
# Builder and runtime use the same base, so the venv's interpreter path exists in both.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN command -v python3 >/dev/null \
    || (apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3 python3-venv ca-certificates \
        && rm -rf /var/lib/apt/lists/*)

RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

COPY . /src
# Installed (not editable) and byte-compiled, with the etcd client a cluster node needs
# (--cluster); then the venv's own installers go: nothing at run time needs them.
RUN pip install "/src[cluster]" \
    && python -m pip uninstall -y -q pip setuptools wheel


FROM ${BASE_IMAGE}

# Only the interpreter at run time: the venv needs no pip. TLS (--tls-cert) uses the
# interpreter's ssl module and the certificates mounted for it: no CA bundle is needed.
RUN command -v python3 >/dev/null \
    || (apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
        && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log) \
    && groupadd --system --gid 10001 huddle \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin huddle \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/huddle

COPY --from=builder /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HUDDLE_HOST=0.0.0.0 \
    HUDDLE_DATA_DIR=/var/lib/huddle

# Topics and committed offsets: kept across restarts of the container; mount a volume here
# to keep them across containers too.
VOLUME /var/lib/huddle

USER 10001:10001
WORKDIR /tmp
EXPOSE 9292

# The server handles SIGTERM itself (it runs as PID 1 here: exec-form CMD, no shell, no init).
STOPSIGNAL SIGTERM

# Shell form so that a server moved off the default port (-e HUDDLE_PORT=...) is still probed.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD huddle ping --bootstrap "127.0.0.1:${HUDDLE_PORT:-9292}" --timeout 2 || exit 1

CMD ["huddle", "serve"]
