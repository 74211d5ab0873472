# The two commands of the README. Each does its own set-up (scripts/setup.sh is idempotent).
.PHONY: setup demo test test-fast bench

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/brb demo

# Two workers, each taking whole files (--dist loadfile), so that a module's ingested home is built
# once, not once in each worker; the template homes are shared by both (conftest.py).
test: setup
	.venv/bin/python -m pytest -n 2 --dist loadfile -q --durations=15

# The edit-run loop: everything but the tests marked slow (`pytest.mark.slow`: the kill -9 harness,
# fault injection, the browser, the end-to-end benchmark), with its 10 slowest tests.
test-fast: setup
	.venv/bin/python -m pytest -n 2 --dist loadfile -q -m "not slow" --durations=10

# The self-contained benchmarks at their default sizes (each prints a table and writes JSON under
# benchmarks/results/). The ones that read an ingested home (bench_retrieval, bench_oneshot,
# bench_labels, bench_parent_child) and the hour-long bench_e2e are in docs/benchmarks.md.
bench: setup
	bash benchmarks/setup_bench.sh
	.venv/bin/python benchmarks/bench_typedstream.py
	.venv/bin/python benchmarks/bench_sources.py
	.venv/bin/python benchmarks/bench_contacts.py
	.venv/bin/python benchmarks/bench_writes.py
	.venv/bin/python benchmarks/bench_search.py
	.venv/bin/python benchmarks/bench_embedding.py
	.venv/bin/python benchmarks/bench_insights.py
