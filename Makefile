# Quartermaster: `make run` (the portal on its embedded default) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Overridable, so that two checkouts can run their tests at once on one machine.
TEST_DATABASE_URL ?= postgres://postgres:postgres@127.0.0.1:5432/quartermaster
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15
TEST_ENV := DEBUG=false SECRET_KEY=test-only-secret-key \
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL)

.PHONY: run test lint bench lock install migrate clean

$(STAMP): requirements/lock.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/lock.txt
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	@mkdir -p var
	DEBUG=true $(PY) manage.py migrate --noinput
	DEBUG=true $(PY) manage.py collectstatic --noinput --verbosity 0
	DEBUG=true $(PY) manage.py seed_demo
	@echo ""
	@echo "  Quartermaster is starting at http://127.0.0.1:8000"
	@echo "  Demo logins (password: quartermaster):"
	@echo "    alice  researcher in team vision     bob    lead of vision"
	@echo "    maria  manager of Research           frank  finance"
	@echo "    admin  platform admin"
	@echo "  Press Ctrl-C to stop everything."
	@echo ""
	DEBUG=true $(VENV)/bin/honcho start -f Procfile

test: $(STAMP)
	bash scripts/ensure-test-services.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TEST_ENV) $(PY) manage.py makemigrations --check --dry-run
	$(TEST_ENV) $(VENV)/bin/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	bash scripts/ensure-test-services.sh
	$(TEST_ENV) $(PY) -m bench $(BENCH)

lock:
	$(PYTHON) -m pip install --quiet uv
	$(PYTHON) -m uv pip compile pyproject.toml --extra dev --python-version 3.11 \
		--output-file requirements/lock.txt

clean:
	rm -rf var .pytest_cache .ruff_cache
