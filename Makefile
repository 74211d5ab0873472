# The two commands of the README. Each does its own set-up (scripts/setup.sh is idempotent).
.PHONY: setup demo test bench

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/brb demo

test: setup
	.venv/bin/python -m pytest -n 2 -q

bench: setup
	.venv/bin/python benchmarks/run_all.py
