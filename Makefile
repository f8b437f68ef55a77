# slurm-k8s-bridge — the two commands are `make demo` and `make test`; both set everything up.
SHELL := /bin/bash
# The venv's base: Debian's python3 when there is one, not whichever python3 is first on PATH (a
# pyenv python under /root can shadow it, and a venv built from that cannot be run by other uids,
# e.g. tests/unit/test_peer_gate.py's callers as nobody). PYTHON=/path/to/python3 overrides.
PYTHON ?= $(or $(wildcard /usr/bin/python3),python3)
VENV := .venv
PY := $(VENV)/bin/python
PG := PYTHONPATH=dev $(PY) -m proving_ground
# SLURM=22.05 or 24.11 (make up, demo, test): the proving ground's Slurm series; 26.05 (from
# Debian sid) when unset. 24.11 and 26.05 run from a cached Debian root, 22.05 is the host's
# (dev/proving_ground/slurm_series.py).
ifdef SLURM
export SKB_SLURM := $(SLURM)
endif
# AUTH=slurm (make up, demo, test): auth/slurm with a shared slurm.key instead of munge, on 24.11
# and 26.05 (22.05 has none: refused). munge when unset.
ifdef AUTH
export SKB_AUTH := $(AUTH)
endif
# HA=1 (make up, demo, test): a primary and a backup slurmctld (the backup on a host of its own,
# dev/proving_ground/backup_host.py), each with a bridge electing a leader; one controller when
# unset. With munge only.
ifdef HA
export SKB_HA := $(HA)
endif
# K8S=1.34 (make up, demo, test): the proving ground's Kubernetes control plane; 1.37 when unset.
# The real node's kubelet is 1.34 either way (dev/proving_ground/layout.py KUBELET_VERSION); a
# ground of the other version starts again from a fresh cluster.
ifdef K8S
export SKB_K8S := $(K8S)
endif
PYTEST_ARGS ?=

.PHONY: help deps venv hook-client build up down status lint typecheck proto check test unit demo bench chaos clean image

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

deps: ## install Debian packages the proving ground needs (root; idempotent)
	@dev/install-deps.sh

$(VENV)/.stamp: pyproject.toml
	$(PYTHON) -m venv --clear $(VENV)  # --clear: never mix two interpreters in one venv
	$(VENV)/bin/pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.stamp ## the project's virtualenv (.venv) with the package installed

# The hooks' static Go client (slurm_plugins/hookclient); hook.sh execs it when built and falls
# back to Python without it. Go is not a Debian package here: the proving ground's own builds
# (dev/build-kubernetes.sh) need the same toolchain.
GO ?= $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go))
HOOK_BIN := slurm_plugins/bin/skb-hook
HOOK_SRC := $(wildcard slurm_plugins/hookclient/*.go slurm_plugins/hookclient/internal/bridgepb/*.go) \
	slurm_plugins/hookclient/go.mod slurm_plugins/hookclient/go.sum

$(HOOK_BIN): $(HOOK_SRC)
	@if [ -z "$(GO)" ]; then \
		echo "make hook-client: no Go toolchain (neither go on PATH nor /usr/local/go/bin/go):" \
			"install Go >= 1.26 (https://go.dev/dl, into /usr/local/go) or pass GO=/path/to/go." \
			"Without it the hooks run Python (slower start-up)." >&2; exit 1; fi
	@echo "hook-client: go build $@"
	@mkdir -p $(@D) && cd slurm_plugins/hookclient && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly \
		$(GO) build -trimpath -ldflags='-s -w' -o ../bin/skb-hook.partial . && mv ../bin/skb-hook.partial ../bin/skb-hook

hook-client: $(HOOK_BIN) ## the hooks' static Go client, slurm_plugins/bin/skb-hook (rebuilt when its sources change)

build: ## build Kubernetes (1.37 and 1.34), etcd, kwok, kustomize, crictl into the cache (once)
	@dev/build-kubernetes.sh

up: deps venv hook-client ## start the proving ground (idempotent)
	@$(PG) up

down: venv ## stop what `make up` started; keeps the cache
	@$(PG) down

status: venv ## what the proving ground runs
	@$(PG) status

lint: venv ## ruff, mypy --strict and the import contracts (pyproject's [tool.importlinter])
	$(VENV)/bin/ruff check bridge tests dev
	$(VENV)/bin/ruff format --check bridge tests dev
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

proto: venv ## regenerate bridge/rpc/_proto (and the Go hook client's internal/bridgepb) from proto/
	$(PY) dev/generate_proto.py
	@if PATH="$$HOME/go/bin:$$PATH" command -v protoc-gen-go-grpc >/dev/null; then \
		PATH="$$HOME/go/bin:$$PATH" slurm_plugins/hookclient/generate.sh; \
	else echo "make proto: protoc-gen-go(-grpc) not installed: Go code left alone (see slurm_plugins/hookclient/generate.sh)"; fi

unit: venv hook-client ## the bridge's unit tests only (no daemons)
	$(PY) -m pytest -m unit -q $(PYTEST_ARGS)

check: venv hook-client lint ## the inner loop (~2 min): lint, then the unit and tooling tiers
	$(PY) -m pytest -m 'unit or tooling' -q $(PYTEST_ARGS)

test: deps venv hook-client lint ## everything: unit, integration and e2e against the proving ground
	@$(PY) -m pytest -q --durations=30 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests: failing"; exit 1; fi; exit $$rc

demo: deps venv hook-client ## the elastic cycle, live: jobs scale slurmd pods up and down
	@$(PG) demo

bench: deps venv hook-client ## benchmarks (ratios against a baseline measured in the same run)
	@$(PY) dev/bench/run.py

CHAOS_ARGS ?= --rounds 3 --nodes 200 --fault-seconds 60
chaos: deps venv hook-client ## fault storms on kwok nodes (~15 min; CHAOS_ARGS=...), then the fuzz suite at 25,000 examples
	@rc=0; $(PY) dev/bench/chaos.py $(CHAOS_ARGS) || rc=$$?; \
	if [ -f tests/unit/test_fuzz.py ]; then \
		SKB_FUZZ_EXAMPLES=25000 $(PY) -m pytest tests/unit/test_fuzz.py -q || rc=1; \
	fi; exit $$rc

image: ## slurmd image of a Slurm series (deploy/images/slurmd): SLURM=24.11 [REGISTRY=host/path PUSH=1] [BASE=image]
	@PYTHONPATH=dev $(PYTHON) -m proving_ground.images -v --slurm $(or $(SLURM),26.05) \
		$(if $(REGISTRY),--registry $(REGISTRY)) $(if $(filter 1 yes true,$(PUSH)),--push) \
		$(if $(BASE),--base $(BASE))

clean: down ## also remove .local (certificates, logs); the build cache stays
	rm -rf .local
