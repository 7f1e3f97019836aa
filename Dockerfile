# One image for web, worker and beat (docker-compose.yml); the commands are scripts/serve's.
FROM python:3.11-slim
# Static files are collected into the image (outside var/, which is a writable volume in a
# cluster whose pods have a read-only root filesystem); the app runs as uid 1000.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 STATIC_ROOT=/app/staticfiles
WORKDIR /app
COPY requirements/lock.txt requirements/lock.txt
RUN pip install --no-cache-dir -r requirements/lock.txt
COPY . .
RUN DEBUG=true python manage.py collectstatic --noinput --verbosity 0 \
    && useradd --create-home --uid 1000 quartermaster && mkdir -p /app/var \
    && chown -R quartermaster /app/var
USER quartermaster
EXPOSE 8000
CMD ["scripts/serve", "web"]
