# One image for web, worker and beat (docker-compose.yml); the commands are scripts/serve's.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY requirements/lock.txt requirements/lock.txt
RUN pip install --no-cache-dir -r requirements/lock.txt
COPY . .
RUN DEBUG=true python manage.py collectstatic --noinput --verbosity 0 \
    && useradd --create-home quartermaster && chown -R quartermaster /app/var
USER quartermaster
EXPOSE 8000
CMD ["scripts/serve", "web"]
