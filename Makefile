# Quartermaster: `make run` (the portal on its embedded default) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Overridable, so that two checkouts can run their tests at once on one machine.
TEST_DATABASE_URL ?= postgres://postgres:postgres@127.0.0.1:5432/quartermaster
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15
# Test processes (pytest-xdist, tests/workers.py): one per core; TEST_WORKERS=0 runs the tests in
# pytest's own process.
TEST_WORKERS ?= auto
CONFORMANCE ?= 1
TEST_ENV := DEBUG=false SECRET_KEY=test-only-secret-key SECURE_HTTPS=false \
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL)

# `make run` is the demo: no DEBUG (no technical error pages), plain HTTP on WEB_BIND, and a
# secret key generated into var/ on the first start and kept there.
WEB_BIND ?= 127.0.0.1:8000
RUN_ENV = DEBUG=false SECURE_HTTPS=false SECRET_KEY="$$(cat var/secret-key)" WEB_BIND=$(WEB_BIND)
# The Procfile's processes `make run` starts; `make run SSO=1` adds the demo's OpenID Connect
# provider (demo/sso_provider, on OIDC_DEMO_PORT) and signs the portal in through it.
RUN_PROCESSES = kubesim kubesim-lab web worker beat
OIDC_DEMO_PORT ?= 8090
ifeq ($(SSO),1)
RUN_PROCESSES += oidc
RUN_ENV += OIDC_DEMO_PORT=$(OIDC_DEMO_PORT) OIDC_ISSUER=http://127.0.0.1:$(OIDC_DEMO_PORT)/openid \
	OIDC_CLIENT_ID=quartermaster-demo OIDC_CLIENT_SECRET=demo-sso-client-secret \
	OIDC_PROVIDER_NAME="the demo identity provider" \
	OIDC_ROLE_MAP="$$($(PY) -m demo.sso_provider.people)"
endif

.PHONY: run test lint bench props lock install migrate clean

$(STAMP): requirements/lock.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements/lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	@mkdir -p var
	@test -s var/secret-key || (umask 077 && $(PY) -c "import secrets; print(secrets.token_urlsafe(50))" > var/secret-key)
	$(RUN_ENV) $(PY) manage.py migrate --noinput
	$(RUN_ENV) $(PY) manage.py collectstatic --noinput --verbosity 0
	$(RUN_ENV) $(PY) manage.py seed_demo
	@echo ""
	@echo "  Quartermaster is starting at http://$(WEB_BIND)"
	@echo "  Demo logins (password: quartermaster):"
	@echo "    alice  researcher in team vision     bob    lead of vision"
	@echo "    maria  manager of Research           frank  finance"
	@echo "    admin  platform admin"
	@test "$(SSO)" != 1 || echo "  Single sign-on: grace, henry, ines, jules, kim at the demo provider (same password)"
	@echo "  Press Ctrl-C to stop everything."
	@echo ""
	$(RUN_ENV) $(PY) scripts/supervise.py -f Procfile $(RUN_PROCESSES)

test: $(STAMP)
	bash scripts/ensure-test-services.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TEST_ENV) $(PY) manage.py makemigrations --check --dry-run
	# The whole suite (no PYTEST_ARGS) also checks that the deployment's roles grant nothing the
	# portal's requests did not use (tests/rbac_record.py).
	$(TEST_ENV) QM_RBAC_EXACT=$(if $(PYTEST_ARGS),0,1) $(VENV)/bin/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)
	# Then the conformance suite against the real control plane (skip with CONFORMANCE=0 while
	# working on one part; CI and a plain `make test` run it).
	if [ "$(CONFORMANCE)" != 0 ]; then $(MAKE) --no-print-directory conformance PYTEST_ARGS=; fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The schema-driven property tests (tests/test_api_properties.py) explored deeper than `make test`
# does: more examples per operation, and another seed to look somewhere new.
PROPS_EXAMPLES ?= 150
PROPS_SEED ?= 32
props: $(STAMP)
	bash scripts/ensure-test-services.sh
	$(TEST_ENV) QM_SCHEMA_EXAMPLES=$(PROPS_EXAMPLES) QM_SCHEMA_SEED=$(PROPS_SEED) \
		$(VENV)/bin/pytest -n $(TEST_WORKERS) tests/test_api_properties.py $(PYTEST_ARGS)

bench: $(STAMP)
	bash scripts/ensure-test-services.sh
	$(TEST_ENV) $(PY) -m bench $(BENCH)

lock:
	$(PYTHON) -m pip install --quiet uv
	$(PYTHON) -m uv pip compile pyproject.toml --extra dev --python-version 3.11 \
		--output-file requirements/lock.txt

clean:
	rm -rf var .pytest_cache .ruff_cache

# The chart's manifests for `kubectl apply -k` (deploy/kubernetes/<shape>), rendered by Helm built
# from its Go module (cluster/build/helm); tests/deploy checks they are the chart's output.
.PHONY: deploy-manifests
deploy-manifests: $(STAMP)
	$(PY) -m cluster.helm render

# The real control plane (cluster/, see the README): kube-apiserver, controller manager,
# scheduler, etcd, Kueue, JobSet, the training operator and kwok built from Go modules into a
# cache outside the checkout (nice: the build takes the machine's cores for many minutes).
.PHONY: cluster conformance
cluster:
	nice -n 10 $(PYTHON) -m cluster build

# The conformance suite against it: build what is missing, start it, run tests/conformance and
# the real half of tests/scenarios (the kubesim half runs in the whole suite) with KUBECONFIG
# pointing at it, and stop it whatever the outcome.
conformance: $(STAMP) cluster
	bash scripts/ensure-test-services.sh
	scripts/real-cluster up
	status=0; $(TEST_ENV) QM_CONFORMANCE=1 KUBECONFIG="$$(scripts/real-cluster kubeconfig)" \
		$(VENV)/bin/pytest tests/conformance tests/scenarios $(PYTEST_ARGS) || status=$$?; \
		scripts/real-cluster down; exit $$status
