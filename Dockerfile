# One image for the API and the worker: `agentmill api` or `agentmill worker` (the default).
# Dependencies come from uv.lock; the runtime stage has only the virtualenv, runs as a numeric
# non-root user, and execs agentmill directly so SIGTERM reaches it (graceful hand-back).

FROM python:3.11.11-slim-bookworm AS build
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
RUN pip install --no-cache-dir uv==0.13.9
COPY pyproject.toml uv.lock README.md ./
COPY clients/python/pyproject.toml clients/python/README.md ./clients/python/
RUN uv sync --frozen --no-install-workspace
COPY clients/python/agentmill_client ./clients/python/agentmill_client
COPY shared ./shared
COPY producer ./producer
COPY worker ./worker
COPY app ./app
RUN uv sync --frozen --no-editable

FROM python:3.11.11-slim-bookworm
# The API listens on every interface in the container (the settings' default, 127.0.0.1, is for a
# developer's machine): a plain `docker run -p 8000:8000 agentmill:0.1.0 api` is reachable. A
# container is one worker process (the orchestrator restarts and scales it), not one per core.
ENV PATH=/app/.venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 AGENTMILL_LOG_JSON=true \
    AGENTMILL_API_HOST=0.0.0.0
ENV AGENTMILL_WORKER_PROCESSES=1
WORKDIR /app
COPY --from=build /app/.venv /app/.venv
USER 10001:10001
EXPOSE 8000 9100 9464
ENTRYPOINT ["agentmill"]
CMD ["worker"]
