"""The person finder that `brb ui` serves beside Dagster: type a name, get that person's partitions.

An encrypted home keeps people's names out of Dagster's storage (it is not encrypted), so
Dagster's own search cannot find "Diego". This small page can: it runs in the `brb ui` process,
on 127.0.0.1 only, and answers from brb.db unsealed in memory. Nothing is written: the page is
served from memory, the name typed travels only in the request to this server (never logged:
the request log is off), and the re-run it offers launches ``contact_backfill_job`` with the
partition keys (``batch-NNN``), not the name, so Dagster's run storage holds no name either.

Who may ask: a request needs the random token in the URL `brb ui` prints (another local user or
a web page cannot guess it) and a Host header naming this server (no DNS rebinding). Answers are
``no-store``, and the page sends no referrer, so the token does not follow a link into Dagster.
"""

from __future__ import annotations

import json
import secrets
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from brb_pipeline.core import DEFAULT_REGION
from brb_pipeline.core.contacts.partitions import person_partitions

#: Dagster's code location and repository of the pipeline (workspace.yaml, one Definitions).
LOCATION, REPOSITORY = "brb_pipeline", "__repository__"
#: The per-batch asset a partition link opens in Dagster.
PARTITION_ASSET = "batch_chunks"
MAX_PEOPLE = 20

_LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } ... on InvalidSubsetError { message } } }"""


class Finder:
    """What the pages ask, answered from ``brb_db``; ``dagster_url`` is the UI it links to."""

    def __init__(self, brb_db: Path, dagster_url: str, *, default_region: str = DEFAULT_REGION) -> None:
        self.brb_db = brb_db
        self.dagster_url = dagster_url.rstrip("/")
        self.default_region = default_region

    def find(self, name: str) -> dict[str, Any]:
        """People ``name`` names (at most :data:`MAX_PEOPLE`), with a Dagster link per partition."""
        if not name.strip() or not self.brb_db.exists():
            return {"people": [], "more": False}
        found = person_partitions(self.brb_db, name, default_region=self.default_region)
        for p in found:
            p.pop("person_id", None)  # a handle: the page needs none
            p["links"] = {k: f"{self.dagster_url}/assets/{PARTITION_ASSET}?view=partitions&partition={quote(k)}"
                          for k in p["partitions"]}
        return {"people": found[:MAX_PEOPLE], "more": len(found) > MAX_PEOPLE}

    def rerun(self, partitions: list[str]) -> dict[str, Any]:
        """Launch ``contact_backfill_job`` on ``partitions`` through Dagster's GraphQL API."""
        if not partitions or not all(isinstance(k, str) and k.startswith("batch-") for k in partitions):
            return {"error": "partitions must be batch keys (batch-NNN)"}
        params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY,
                               "jobName": "contact_backfill_job"},
                  "runConfigData": {"ops": {"backfill_contact_op": {"config": {"partitions": partitions}}}},
                  "executionMetadata": {"tags": [{"key": "brb/source", "value": "ui"},
                                                 {"key": "brb/launched_by", "value": "person_finder"}]}}
        req = urllib.request.Request(f"{self.dagster_url}/graphql", method="POST",
                                     data=json.dumps({"query": _LAUNCH, "variables": {"p": params}}).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                answer = json.loads(resp.read())["data"]["launchRun"]
        except (OSError, KeyError, ValueError) as e:
            return {"error": f"Dagster did not take the run ({type(e).__name__})"}
        if answer.get("__typename") != "LaunchRunSuccess":
            return {"error": answer.get("message") or answer.get("__typename") or "not launched"}
        run_id = answer["run"]["runId"]
        return {"run_id": run_id, "url": f"{self.dagster_url}/runs/{run_id}"}


def _handler(finder: Finder, token: str, hosts: set[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # the query holds a name: no log
            return

        def _allowed(self) -> dict[str, list[str]] | None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            if self.headers.get("Host") not in hosts or not secrets.compare_digest(
                    (query.get("t") or [""])[0], token):
                self._send(403, "text/plain", b"forbidden")
                return None
            return query

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            query = self._allowed()
            if query is None:
                return
            path = urlsplit(self.path).path
            if path == "/":
                self._send(200, "text/html; charset=utf-8", PAGE.encode())
            elif path == "/find":
                self._json(finder.find((query.get("q") or [""])[0]))
            else:
                self._send(404, "text/plain", b"not found")

        def do_POST(self) -> None:  # noqa: N802
            if self._allowed() is None:
                return
            if urlsplit(self.path).path != "/rerun":
                self._send(404, "text/plain", b"not found")
                return
            try:
                body = json.loads(self.rfile.read(min(int(self.headers.get("Content-Length") or 0), 65536)))
                partitions = list(body["partitions"])
            except (ValueError, KeyError, TypeError):
                self._json({"error": "expected {\"partitions\": [...]}"}, 400)
                return
            self._json(finder.rerun(partitions))

        def _json(self, obj: Any, status: int = 200) -> None:
            self._send(status, "application/json", json.dumps(obj, ensure_ascii=False).encode())

        def _send(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                                                        "style-src 'unsafe-inline'; connect-src 'self'")
            self.end_headers()
            self.wfile.write(body)

    return Handler


class FinderServer:
    """The finder on ``127.0.0.1:port`` in a daemon thread; :attr:`url` carries the token."""

    def __init__(self, finder: Finder, port: int = 0) -> None:
        self.token = secrets.token_urlsafe(18)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), BaseHTTPRequestHandler)
        self.port = self.httpd.server_address[1]
        hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self.httpd.RequestHandlerClass = _handler(finder, self.token, hosts)
        self.url = f"http://127.0.0.1:{self.port}/?t={self.token}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="brb-person-finder", daemon=True)

    def start(self) -> FinderServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_finder(brb_db: Path, dagster_port: int, *, default_region: str = DEFAULT_REGION, port: int = 0) -> FinderServer:
    """Serve the finder for the Dagster UI on ``dagster_port``; ``port`` 0 picks a free one."""
    finder = Finder(brb_db, f"http://127.0.0.1:{dagster_port}", default_region=default_region)
    return FinderServer(finder, port).start()


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>brb · find a person</title>
<meta name="referrer" content="no-referrer">
<style>
body { font: 14px system-ui, sans-serif; margin: 2rem auto; max-width: 56rem; color: #222; }
input { font-size: 1.1rem; padding: .4rem .6rem; width: 24rem; }
.p { border-bottom: 1px solid #ddd; padding: .6rem 0; } .n { font-weight: 600; }
.c { color: #555; margin: .2rem 0 0 1rem; } a { color: #2563eb; } button { margin-left: .6rem; }
#status { color: #555; margin: .6rem 0; }
</style></head><body>
<h2>Find a person's partitions</h2>
<p>Type a name, part of one, a nickname or a handle. The answer comes from this machine's brb.db;
nothing you type is stored. <i>Re-run</i> launches <code>contact_backfill_job</code> on the
partitions only, so no name goes into Dagster.</p>
<input id="q" placeholder="e.g. Diego" autofocus autocomplete="off">
<div id="status"></div><div id="out"></div>
<script>
const T = new URLSearchParams(location.search).get('t');
const out = document.getElementById('out'), status = document.getElementById('status');
let seq = 0;
function el(tag, text, cls) { const e = document.createElement(tag); if (text) e.textContent = text;
  if (cls) e.className = cls; return e; }
async function find() {
  const q = document.getElementById('q').value, mine = ++seq;
  if (!q.trim()) { out.replaceChildren(); status.textContent = ''; return; }
  const r = await fetch('/find?t=' + encodeURIComponent(T) + '&q=' + encodeURIComponent(q));
  const data = await r.json();
  if (mine !== seq) return;
  status.textContent = data.people.length ? data.people.length + (data.more ? '+' : '') + ' found' : 'nobody matches';
  out.replaceChildren(...data.people.map(show));
}
function show(p) {
  const div = el('div', '', 'p'); div.append(el('span', p.name, 'n'));
  div.append(' ' + p.messages.toLocaleString() + ' messages · ');
  for (const k of p.partitions) { const a = el('a', k); a.href = p.links[k]; a.target = '_blank';
    a.rel = 'noreferrer'; a.className = 'part'; div.append(a, ' '); }
  const b = el('button', 'Re-run ' + (p.partitions.length === 1 ? 'its partition' : 'these partitions'));
  b.className = 'rerun'; b.disabled = !p.partitions.length;
  b.onclick = async () => {
    b.disabled = true; status.textContent = 'launching...';
    const r = await fetch('/rerun?t=' + encodeURIComponent(T), {method: 'POST',
      headers: {'Content-Type': 'application/json'}, body: JSON.stringify({partitions: p.partitions})});
    const a = await r.json();
    if (a.error) { status.textContent = 'not launched: ' + a.error; b.disabled = false; return; }
    status.replaceChildren('launched: ');
    const link = el('a', a.run_id); link.href = a.url; link.target = '_blank'; link.rel = 'noreferrer';
    link.id = 'run'; status.append(link);
  };
  div.append(b);
  for (const c of p.conversations) div.append(el('div', (c.partition || 'no batch') + ': ' + c.conversation, 'c'));
  return div;
}
document.getElementById('q').addEventListener('input', find);
</script></body></html>
"""
