#!/usr/bin/env bash
# Makes sure what the tests need runs on this machine: PostgreSQL and Redis on 127.0.0.1,
# Debian's chromium (browser tests), prometheus (billing tests) and kubectl (deployment tests). Starts what is installed
# but stopped; installs with apt-get what is missing (needs root, as in CI).
set -euo pipefail

APT_UPDATED=""
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "ensure-test-services: '$*' is missing and installing it needs root." >&2
    exit 1
  fi
  if [ -z "$APT_UPDATED" ]; then
    apt-get update -qq
    APT_UPDATED=1
  fi
  echo "ensure-test-services: apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

wait_for() {  # wait_for SECONDS COMMAND...
  local seconds=$1; shift
  for _ in $(seq 1 "$seconds"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  return 1
}

# PostgreSQL
if ! command -v pg_isready >/dev/null 2>&1 || ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    apt_install postgresql
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_for 30 pg_isready -h 127.0.0.1 -p 5432 -q || { echo "PostgreSQL did not start" >&2; exit 1; }
fi
# The tests connect as postgres/postgres over TCP; a fresh install asks for a password there.
if ! PGPASSWORD=postgres psql -h 127.0.0.1 -U postgres -d postgres -tAc 'select 1' >/dev/null 2>&1; then
  su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null
fi

# Redis
if ! command -v redis-cli >/dev/null 2>&1 || ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/test.log
  wait_for 15 redis-cli -h 127.0.0.1 -p 6379 ping || { echo "Redis did not start" >&2; exit 1; }
fi

# Chromium for Playwright (it cannot download its own browser here) and Prometheus.
[ -x /usr/bin/chromium ] || apt_install chromium
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || apt_install prometheus
# kubectl renders the deployment's kustomize overlays (Debian's package is kubernetes-client).
command -v kubectl >/dev/null 2>&1 || apt_install kubernetes-client

echo "ensure-test-services: PostgreSQL, Redis, Chromium, Prometheus and kubectl are ready."
