# fleet-console: the two commands that matter are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-quick lint bench bench-scale incidents sshd-deps clean install

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

## Open the console on the embedded demo fleet (local SSH server, simulated GPUs, real processes).
demo: $(STAMP)
	$(VENV)/bin/fleet-console demo

## Install what the tests need (OpenSSH server, tmux, Prometheus, Chromium when run as root) and run the whole suite.
test: $(STAMP) sshd-deps lint
	$(PY) -m pytest -q -n 2 --dist loadfile

## The loop to run while editing: the tests that need no OpenSSH server and no tmux, less the slow ones
## (about 80 s on 2 cores, under load). Markers set by tests/conftest.py: sshd, tmux, and slow for the app driven
## through Pilot; slow is also put by hand on the other tests that take 3 s and more alone (real agents, the
## demo fleet, process timing). `make test` runs them all.
test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not sshd and not tmux and not slow"

sshd-deps:
	@if ! command -v sshd >/dev/null 2>&1 && ! test -x /usr/sbin/sshd || ! command -v tmux >/dev/null 2>&1 \
	    || ! command -v prometheus >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client tmux prometheus) >/dev/null; \
	  else \
	    echo "need openssh-server, tmux and prometheus: run as root or: sudo apt-get install openssh-server tmux prometheus" >&2; exit 1; \
	  fi; \
	fi
	@# headless Chromium for tests/test_web.py (the web console in a real browser); without root that test skips
	@if ! command -v chromium >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) >/dev/null; \
	fi

## ruff, and mypy over console/ widgets/ themes/ (strict on the wire contract and the fleet state).
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

## Score the diagnosis on the incident corpus (tests/fixtures/incidents): one row per incident, then totals.
incidents: $(STAMP) sshd-deps
	$(PY) bench/incidents.py

bench: $(STAMP)
	$(PY) bench/run_all.py

## The console against HOSTS SSH instances replayed by one local process (bench/scale.py), driven by keys.
HOSTS ?= 100,500,1000
bench-scale: $(STAMP)
	$(PY) bench/scale.py --hosts $(HOSTS)

## Put `fleet-console` on PATH: the venv's entry point, linked into $(PREFIX)/bin (default ~/.local/bin).
PREFIX ?= $(HOME)/.local
install: $(STAMP)
	mkdir -p $(PREFIX)/bin
	ln -sf $(abspath $(VENV))/bin/fleet-console $(PREFIX)/bin/fleet-console
	@case ":$$PATH:" in *":$(PREFIX)/bin:"*) echo "fleet-console -> $(PREFIX)/bin/fleet-console";; \
	  *) echo "fleet-console is in $(PREFIX)/bin, which is not on PATH: add  export PATH=\"$(PREFIX)/bin:\$$PATH\"  to ~/.bashrc";; esac

clean:
	rm -rf $(VENV) build dist .pytest_cache
