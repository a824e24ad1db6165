FROM python:3.12-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE CHATRAG_VAR_DIR=/app/var
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
# Static files with hashed names, in the image: every web replica serves them (WhiteNoise).
# Settings need a secret, a database URL and Redis (or one web process) to load; none is used
# by collectstatic.
RUN CHATRAG_ALLOW_DEV_SECRET=1 DATABASE_URL=postgresql://build@localhost/build \
    CHATRAG_SINGLE_WEB_PROCESS=1 python manage.py collectstatic --noinput -v 0
# The media folder exists before the volume is mounted on it, so the volume is the app's.
RUN mkdir -p /app/var/media && useradd --create-home app && chown -R app /app
USER app
EXPOSE 8000
