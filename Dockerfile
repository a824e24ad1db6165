FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
RUN apt-get update && apt-get install -y --no-install-recommends gcc libgomp1 gettext \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY chatrag ./chatrag
COPY conversations ./conversations
COPY retrieval ./retrieval
# The production install: without the `dev` extra (embedded PostgreSQL, test tools).
RUN pip install --no-cache-dir .
COPY . .
RUN for po in locale/*/LC_MESSAGES/django.po; do msgfmt --check -o "${po%.po}.mo" "$po"; done
RUN useradd --create-home app && chown -R app /app
USER app
EXPOSE 8000
