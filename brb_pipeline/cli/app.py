"""`brb`: the command line over the same asset graph, headless.

Library errors (:class:`BrbError`) become one-line messages and a non-zero exit code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from brb_pipeline import keys
from brb_pipeline.cli.insights import insights_command
from brb_pipeline.cli.keys import encryption_override, no_encryption_opt, rekey_command
from brb_pipeline.cli.mcp import mcp_command
from brb_pipeline.cli.people import people_command
from brb_pipeline.cli.profile import profile_command
from brb_pipeline.cli.recovery import check_db, finish_forgets, forget_targets, rebuild_home, wipe_events
from brb_pipeline.cli.output import MAIL_WARNING, WHATSAPP_WARNING, search_text, status_dict, status_lines
from brb_pipeline.core.errors import BrbError, CancelledError
from brb_pipeline.config.settings import Settings

class BrbGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CancelledError as e:
            click.echo(f"brb: {e}", err=True)
            if getattr(e, "abandoned", False):
                # a step was still running in the worker thread: leave without waiting for it
                # (nothing it writes is published half-way; see stages/store.py)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(e.exit_code)
            ctx.exit(e.exit_code)
        except BrbError as e:
            click.echo(f"brb: error: {e}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as e:  # a bug: still one line for the user, the trace on request
            if os.environ.get("BRB_DEBUG"):
                raise
            first = (str(e).splitlines() or [""])[0][:300]
            click.echo(f"brb: internal error: {type(e).__name__}: {first} (BRB_DEBUG=1 shows the trace)", err=True)
            ctx.exit(70)


@click.group(cls=BrbGroup)
@click.version_option(package_name="brb-pipeline")
def main() -> None:
    """brb: your message history, searchable and mapped, on your own machine."""
    keys.install()  # the entry point: an encrypted home's files open with the home's key
    logging.basicConfig(level=os.environ.get("BRB_LOG", "WARNING"), stream=sys.stderr,
                        format="%(levelname)s %(message)s")


home_opt = click.option("--home", type=click.Path(path_type=Path), default=None,
                        help="Pipeline home dir (default: $BRB_HOME or ~/.brb).")


def _settings(home: Path | None, write: bool = False, **overrides: Any) -> Settings:
    """The settings of one command (a relative ``home`` is made absolute). ``write``: the command
    writes the home, so one that cannot be written is refused now with one line saying why."""

    s = Settings.load(home, **overrides)
    if write:
        s.check_writable()
    return s


@main.command()
@click.option("--chat-db", type=click.Path(path_type=Path, readable=False), default=None,  # brb says why not
              help="Apple Messages chat.db (default on macOS: ~/Library/Messages/chat.db).")
@click.option("--addressbook", type=click.Path(path_type=Path), default=None,
              help="Folder with AddressBook-v22.abcddb (default on macOS: ~/Library/Application Support/AddressBook).")
@click.option("--attachments", "attachments_dir", type=click.Path(path_type=Path), default=None,
              help="Messages attachments folder chat.db's paths resolve against (default: "
                   "~/Library/Messages/Attachments); files are listed, never opened or copied.")
@click.option("--voice-lengths/--no-voice-lengths", default=None,
              help="Read each iMessage voice message's length from its .caf file's header (opens those "
                   "files; chat.db holds no length). Off by default; remembered.")
@click.option("--whatsapp", type=click.Path(path_type=Path), default=None,
              help="WhatsApp ChatStorage.sqlite; giving it turns the WhatsApp channel on.")
@click.option("--no-whatsapp", is_flag=True, help="Turn the WhatsApp channel off.")
@click.option("--mail", type=click.Path(path_type=Path), default=None,
              help="Mail folder (~/Library/Mail, holding V10/MailData/Envelope Index); giving it turns the Mail channel on.")
@click.option("--no-mail", is_flag=True, help="Turn the Mail channel off.")
@click.option("--contact", "contacts", multiple=True, help="Re-run only this contact (name or handle); repeatable.")
@click.option("--progress", "progress_mode", type=click.Choice(["bars", "jsonl", "none"]), default=None,
              help="bars (terminal), jsonl (JSON lines on stdout for a host app) or none.")
@click.option("--cancel-file", type=click.Path(path_type=Path), default=None,
              help="Stop at the next batch boundary when this file appears.")
@click.option("--no-insights", is_flag=True, help="Skip the insights map.")
@click.option("--reembed", is_flag=True, help="Embed every chunk again (e.g. after upgrading MLX).")
@click.option("--embedding-model", default=None, help="Embed with this model from now on (remembered in the home's "
              "config.json): bundled:all-MiniLM-L6-v2, a local model directory, or hash; every chunk is re-embedded.")
@click.option("--no-wait", is_flag=True, help="Refuse at once when another ingest runs on this home.")
@click.option("--rebuild", is_flag=True, help="Rebuild the search store from staging (and a damaged brb.db from "
              "the snapshot, keeping the forgotten list and search log).")
@no_encryption_opt
@home_opt
def ingest(chat_db, addressbook, attachments_dir, voice_lengths, whatsapp, no_whatsapp, mail, no_mail, contacts,
           progress_mode, cancel_file, no_insights, reembed, embedding_model, no_wait, rebuild, no_encryption, home):
    """Snapshot the sources and run every stage: parse, chunk, embed, store, index, map.

    On macOS, with no source given or saved, reads ~/Library/Messages/chat.db and
    ~/Library/Application Support/AddressBook."""
    from brb_pipeline.config import settings as settings_mod

    overrides: dict[str, Any] = {"chat_db": chat_db, "addressbook_dir": addressbook,
                                 **({"attachments_dir": attachments_dir} if attachments_dir else {}),
                                 **({"embedding_model": embedding_model} if embedding_model else {}),
                                 **({"voice_lengths": voice_lengths} if voice_lengths is not None else {}),
                                 **encryption_override(no_encryption, home, settings_mod.default_home)}
    if whatsapp:
        overrides.update(whatsapp_db=whatsapp, whatsapp_enabled=True)
    if no_whatsapp:
        overrides["whatsapp_enabled"] = False
    if mail:
        overrides.update(mail_dir=mail, mail_enabled=True)
    if no_mail:
        overrides["mail_enabled"] = False
    s = settings_mod.with_platform_defaults(_settings(home, **overrides), Path.home(), sys.platform)
    if s.imessage_enabled:  # a private chat.db: Full Disk Access is the first thing to say
        settings_mod.check_source_readable(s.chat_db, "chat.db")
    s.check_writable()
    if embedding_model:  # a model that cannot load is said before anything is read or written
        from brb_pipeline.core.embedding.models import load_or_explain

        load_or_explain(s.embedding)
    if rebuild:
        rebuild_home(s, wait=not no_wait)
    else:
        check_db(s)
    _run_ingest(s, progress_mode, cancel_file, list(contacts), analyze=not no_insights, reembed=reembed,
                wait=not no_wait)


def _run_ingest(s: Settings, progress_mode: str | None, cancel_file: Path | None, contacts: list[str],
                analyze: bool = True, reembed: bool = False, wait: bool = True) -> dict[str, Any]:
    from brb_pipeline.core.progress import CancelToken, JsonlSink, Progress, RichSink

    mode = progress_mode or ("bars" if sys.stderr.isatty() else "none")
    cancel = CancelToken(cancel_file)
    restore = cancel.install_signal_handlers()
    real_stdout = sys.stdout
    sinks: list[Any] = []
    stack = contextlib.ExitStack()
    if mode == "jsonl":
        jsonl = JsonlSink(real_stdout)
        sinks.append(jsonl)
        # Nothing but JSON lines may reach stdout: library prints and warnings go to stderr.
        stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        cancel.watch_stdin()
    elif mode == "bars":
        sinks.append(stack.enter_context(RichSink()))
    progress = Progress(sinks)
    if s.whatsapp_enabled:
        progress.log("warning", WHATSAPP_WARNING)
        if mode != "jsonl":
            click.echo(f"brb: {WHATSAPP_WARNING}", err=True)
    if s.mail_enabled:
        progress.log("warning", MAIL_WARNING)
        if mode != "jsonl":
            click.echo(f"brb: {MAIL_WARNING}", err=True)
    try:
        with stack:
            from brb_pipeline.stages.homelock import hold
            from brb_pipeline.orchestration.runner import _guard_sources, run_ingest

            _guard_sources(s)  # before the lock file: a home inside a source folder is never created

            def waiting(line: str) -> None:  # another ingest holds the home: say so once
                progress.log("warning", line)
                if mode != "jsonl":
                    click.echo(f"brb: {line}", err=True)

            stack.enter_context(hold(s.home, wait=wait, cancelled=lambda: cancel.cancelled, on_wait=waiting))

            contact_ids = _resolve_contacts(s, contacts) if contacts else None
            result = _in_worker(lambda: run_ingest(s, progress=progress, cancel=cancel, only_contacts=contact_ids,
                                                   analyze=analyze, reembed=reembed), cancel, s)
    except BrbError as e:
        if mode == "jsonl":
            JsonlSink(real_stdout).emit({"type": "result", "success": False,
                                         "error": {"kind": type(e).__name__, "message": str(e)}})
        raise
    except Exception as e:  # unexpected: still one JSON result line for a host app
        if mode == "jsonl":
            JsonlSink(real_stdout).emit({"type": "result", "success": False,
                                         "error": {"kind": type(e).__name__, "message": str(e).splitlines()[0][:300]}})
        raise
    finally:
        restore()
    if mode == "jsonl":
        JsonlSink(real_stdout).emit({"type": "result", "success": True, "data": result})
    else:
        click.echo(f"brb: ingested {result['messages']:,} messages into {result['chunks']:,} chunks "
                   f"({len(result['batches_processed'])} of {result['batches']} batches processed) "
                   f"in {result['timings'].get('total', 0):.0f} s; home {s.home}", err=True)
    return result


#: After a cancel, how long the running step may take to reach a cancellation point before brb
#: stops without it (a second signal stops at once).
CANCEL_GRACE_S = 3.0


def _in_worker(fn, cancel=None, s: Settings | None = None):
    """Run ``fn`` in a worker thread while the main thread keeps our signal handlers.

    Dagster's in-process executor replaces SIGINT handling on the main thread and raises inside
    whatever step is running; in a worker thread it leaves signals alone, so Ctrl-C / SIGTERM
    reach our CancelToken and the run stops at the next cancellation point. A step that does not
    reach one within :data:`CANCEL_GRACE_S` (an index build, a wait for a concurrency slot) is
    abandoned: the run is recorded as cancelled and the process exits, which is as safe as a kill
    (the store is replaced only by a complete, indexed copy).
    """
    import threading
    import time

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # re-raised in the main thread
            box["error"] = e

    t = threading.Thread(target=target, name="brb-ingest", daemon=True)
    t.start()
    deadline = None
    while t.is_alive():
        t.join(0.2)
        if cancel is None or not cancel.cancelled or not t.is_alive():
            continue
        deadline = deadline or time.monotonic() + CANCEL_GRACE_S
        if getattr(cancel, "urgent", False) or time.monotonic() > deadline:
            reason = f"cancelled ({cancel.reason}) during a step; the previous complete store, indexes and map are intact"
            if s is not None:
                from brb_pipeline.orchestration.instance import abandon_own_runs

                with contextlib.suppress(Exception):
                    abandon_own_runs(s, reason)
            err = CancelledError(reason)
            err.abandoned = True
            raise err
    if "error" in box:
        raise box["error"]
    return box["result"]


def _resolve_contacts(s: Settings, names: list[str]) -> list[str]:
    from brb_pipeline.core.contacts.people_db import person_contact_ids

    return person_contact_ids(s.brb_db, names, default_region=s.default_region)


@main.command()
@click.option("--messages", type=int, default=6000, show_default=True,
              help="Size of the demo archive (0 = the whole chitchat corpus, ~258K messages).")
@click.option("--whatsapp", is_flag=True, help="Also build and ingest a demo WhatsApp store.")
@click.option("--mail", is_flag=True, help="Also build and ingest a demo Mail store.")
@click.option("--mail-messages", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --mail: that many more mail messages in reply threads (a Mail-heavy home).")
@click.option("--progress", "progress_mode", type=click.Choice(["bars", "jsonl", "none"]), default=None)
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="Demo home dir (default: $BRB_DEMO_HOME or ~/.brb-demo, never $BRB_HOME).")
@no_encryption_opt
def demo(messages, whatsapp, mail, mail_messages, progress_mode, home, no_encryption):
    """Build the demo archive (real Apple schemas, real human chat corpus) and ingest it into its
    own home; a home holding a real ingestion is refused."""
    from brb_pipeline.core.errors import SettingsError
    from brb_pipeline.demo.generate import build_demo_archive
    from brb_pipeline.config.settings import default_demo_home

    s = _settings(home or default_demo_home(), write=True, **encryption_override(no_encryption, home, default_demo_home))
    held = s.real_ingestion()
    if held:
        raise SettingsError(f"{s.home} holds {held}; `brb demo` will not replace it: give it another --home")
    mail = mail or mail_messages > 0
    archive = build_demo_archive(s.demo_archive_dir, messages=messages or None, whatsapp=whatsapp, mail=mail,
                                 mail_messages=mail_messages)
    s = _settings(s.home, chat_db=archive.chat_db, addressbook_dir=archive.addressbook_dir,
                  attachments_dir=archive.attachments_dir,
                  whatsapp_db=archive.whatsapp_db if whatsapp else None, whatsapp_enabled=bool(whatsapp),
                  mail_dir=archive.mail_dir, mail_enabled=bool(mail), encryption=s.encryption)
    _run_ingest(s, progress_mode, None, [])
    click.echo(json.dumps(status_dict(s), indent=2, default=str))
    click.echo(f"brb: the demo lives in {s.home}; try `brb search --home {s.home} \"horror movie marathon\"`",
               err=True)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@home_opt
def status(as_json, home):
    """What is stored: messages, contacts, chunks, model, last ingestion, enabled channels."""
    from brb_pipeline.keys.provider import data_key

    s = _settings(home)
    check_db(s)
    st = status_dict(s)
    if st["encryption"].get("key_ok") is False and s.brb_db.exists():
        data_key(s.home)  # raises the key error: a home we cannot open is not an empty one
    if finish_forgets(s):
        st = status_dict(s)
    if as_json:
        click.echo(json.dumps(st, indent=2, default=str))
    else:
        click.echo("\n".join(status_lines(st)))
    if st.get("damaged"):  # reported above; the exit code says so too
        raise BrbError(next(iter(st["damaged"].values())))


@main.command()
@click.option("--port", default=3000, show_default=True)
@home_opt
def ui(port, home):
    """Open the Dagster UI on this pipeline (every stage can be materialized there)."""
    from brb_pipeline.orchestration.instance import instance_for

    s = _settings(home, write=True)
    instance_for(s)
    if s.schedule_enabled:
        click.echo(f"brb: automation starts on (schedule_enabled): brb re-ingests when chat.db changes and at "
                   f"'{s.schedule_cron}'; a choice made in Dagster UI -> Automation wins", err=True)
    else:
        click.echo("brb: automation is off (nothing reads your messages in the background) until you turn on "
                   "brb_automation: Dagster UI -> Automation, or set schedule_enabled", err=True)
    from brb_pipeline.orchestration.finder import start_finder

    finder = start_finder(s.brb_db, port, default_region=s.default_region)  # names never reach Dagster
    click.echo(f"brb: find a person's partitions by name: {finder.url}", err=True)
    env = {**os.environ, "DAGSTER_HOME": str(s.dagster_home), "BRB_HOME": str(s.home)}
    from brb_pipeline.orchestration.ui import WORKSPACE, serve

    sys.exit(serve(WORKSPACE, port, env))  # the webserver + the daemon, not `dagster dev`


def _parse_date(value: str | None, name: str):
    from datetime import datetime, timezone

    if not value:
        return None
    try:
        d = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date like 2024-05-01 or 2024-05-01T18:00", param_hint=name)
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


@main.command()
@click.argument("query")
@click.option("--contact", "contacts", multiple=True,
              help="Only conversations this person takes part in, 1:1 and groups (name or handle); repeatable.")
@click.option("--from", "senders", multiple=True, help="Only passages with a message this person sent; repeatable.")
@click.option("--since", default=None, help="Only chunks from this date on (YYYY-MM-DD[THH:MM]).")
@click.option("--until", default=None, help="Only chunks before this date.")
@click.option("--mode", type=click.Choice(["hybrid", "vector", "lexical"]), default="hybrid", show_default=True)
@click.option("-k", "k", type=click.IntRange(1, 200), default=10, show_default=True, help="Results to return.")
@click.option("--channel", type=click.Choice(["imessage", "whatsapp", "mail"]), default=None)
@click.option("--context", is_flag=True, help="Include the neighbouring chunks of each hit.")
@click.option("--diversity", type=click.FloatRange(0.0, 1.0, min_open=True), default=None, is_flag=False,
              flag_value=0.7, help="Spread hits over different passages (MMR; 1 = relevance only). Alone: 0.7.")
@click.option("--no-route", is_flag=True, help="Do not turn a contact named in the query into a filter.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@home_opt
def search(query, contacts, senders, since, until, mode, k, channel, context, diversity, no_route, as_json, home):
    """Hybrid (vector + BM25, fused) search over your conversations; overlapping windows of one
    conversation come back as one passage.

    QUERY "-" keeps the store open and answers one query per stdin line, printing one JSON
    object per line (an error object for a query that fails); the options apply to every query.
    """
    # DuckDB's client imports pandas (a large share of a one-shot search) the first time it binds
    # a parameter, to ask whether the value is a pandas object; a search binds none, and nothing
    # else on this path uses pandas, so this process treats it as absent unless already loaded.
    sys.modules.setdefault("pandas", None)
    from brb_pipeline.search.query import Searcher, run_search_cold

    s = _settings(home)
    finish_forgets(s)  # a `brb forget` killed half-way is finished before anything is shown
    options = dict(mode=mode, k=k, contacts=list(contacts) or None, senders=list(senders) or None,
                   since=_parse_date(since, "--since"),
                   until=_parse_date(until, "--until"), channel=channel, route=not no_route, context=context,
                   diversity=diversity)
    import duckdb

    try:
        if query == "-":
            from brb_pipeline.search.hit_files import HitFiles

            with Searcher.open(s, mode=mode) as searcher:
                _search_lines(searcher, options, HitFiles(s.paths.messages))
            return
        out = run_search_cold(s, query, **options)
    except duckdb.Error as e:  # a checksum or AES tag that fails: say which file, and the way out
        from brb_pipeline.stages.repair import damaged_store_error

        raise damaged_store_error(s, e) from None
    if as_json:  # a program also gets each passage's files and links, with their paths
        from brb_pipeline.search.hit_files import add_hit_files

        add_hit_files(out, s.paths.messages)
        click.echo(json.dumps(out, indent=2, ensure_ascii=False, default=str))
    else:
        click.echo(search_text(out))
        click.echo(f"\n{len(out['hits'])} results in {out['latency_ms']:.0f} ms ({out['mode']})", err=True)
    _leave_now()


def _leave_now() -> None:
    """End a one-shot search's process at once: its answer is printed, the store is closed and
    the search log is written (sealed and renamed into place), so the interpreter's teardown
    (freeing the model, unloading DuckDB's extensions: ~100 ms) has nothing left to do for it.
    Only in a process of its own: where stdout is not the process's (click's CliRunner, a test's
    capture) the caller goes on."""
    if sys.stdout is not sys.__stdout__:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _search_lines(searcher, options: dict, files=None) -> None:
    """One JSON line out per query line in; blank lines are skipped, EOF ends the session. Hits
    carry ``files`` as in a one-shot ``--json`` answer (``hit_files.HitFiles``)."""
    for line in sys.stdin:
        query = line.strip()
        if not query:
            continue
        try:
            out = searcher.search(query, **options)
            if files is not None:
                files.add(out)
        except BrbError as exc:
            out = {"query": query, "error": str(exc)}
        click.echo(json.dumps(out, ensure_ascii=False, default=str))
        sys.stdout.flush()


@main.command()
@home_opt
def reindex(home):
    """Rebuild the HNSW and BM25 indexes from the stored chunks (e.g. after a crash)."""
    from brb_pipeline.core.store.index import FTS_SCHEMA, HNSW_INDEX
    from brb_pipeline.stages import repair
    from brb_pipeline.stages.homelock import hold
    from brb_pipeline.stages.store import run_reindex

    s = _settings(home)
    with hold(s.home, what="reindex", on_wait=lambda m: click.echo(f"brb: {m}", err=True)):
        check_db(s)
        damage = repair.store_damage(s)
        if damage:
            r = repair.rebuild_store(s)
            click.echo(f"brb: {s.duckdb_path} was damaged ({damage}); rebuilt it from staging: {r['chunks']:,} "
                       "chunks, both indexes" + (f"; {r['batches_to_embed']} batches had no staged vectors left: "
                                                 "run `brb ingest` to embed them" if r["batches_to_embed"] else ""),
                       err=True)
            return
        r = run_reindex(s)
    v, t = r.get(HNSW_INDEX, {}), r.get(FTS_SCHEMA, {})
    click.echo(f"brb: HNSW over {v.get('rows', 0):,} chunks in {v.get('seconds', 0):.1f} s, "
               f"BM25 over {t.get('rows', 0):,} chunks in {t.get('seconds', 0):.1f} s", err=True)


@main.command("search-log")
@click.option("--clear", is_flag=True, help="Delete the search log.")
@click.option("-n", "limit", default=20, show_default=True)
@home_opt
def search_log(clear, limit, home):
    """Show (or clear) the local log of searches: query, mode, model, results, latency."""
    from brb_pipeline.core.search.log import clear_log, read_log

    s = _settings(home)
    if clear:
        click.echo(f"removed {clear_log(s.brb_db)} logged searches")
        return
    click.echo(json.dumps(read_log(s.brb_db, limit) if s.brb_db.exists() else [], indent=2, ensure_ascii=False))


@main.command()
@click.option("--contact", "contacts", multiple=True, required=True, help="Name or handle; repeatable.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@home_opt
def forget(contacts, yes, home):
    """Remove a contact's data from every place brb keeps it, and skip them in future ingestions."""
    from brb_pipeline.stages.homelock import hold
    from brb_pipeline.privacy.forget import forget_contacts

    s = _settings(home)
    if not s.brb_db.exists():
        raise BrbError(f"nothing stored in {s.home}")
    finished = finish_forgets(s, wait=True)
    ids, group_only, already = forget_targets(s, list(contacts), finished)
    if (ids or group_only) and not yes:
        click.confirm(f"Forget {len(ids) + (1 if group_only else 0)} contact(s) everywhere in {s.home}?", abort=True)
    report: dict[str, Any] = {"contacts": 0, "already_forgotten": already, "interrupted_forgets_finished": len(finished)}
    if ids or group_only:
        with hold(s.home, what="forget", on_wait=lambda m: click.echo(f"brb: {m}", err=True)):
            report = {**forget_contacts(s, ids, group_only, finish=wipe_events), "already_forgotten": already,
                      "interrupted_forgets_finished": len(finished)}
    click.echo(json.dumps(report, indent=2))
    click.echo("brb: forgotten. The map is redrawn at the next `brb ingest`.", err=True)


@main.command("delete-all")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@home_opt
def delete_all_cmd(yes, home):
    """Delete everything brb stored: databases, staging, snapshots, map, search log, Dagster runs."""
    from brb_pipeline.privacy.forget import delete_all

    s = _settings(home)
    if not yes:
        click.confirm(f"Delete everything under {s.home}?", abort=True)
    removed = delete_all(s)
    click.echo(f"brb: removed {len(removed)} items from {s.home}", err=True)


main.add_command(profile_command(home_opt, _settings))
main.add_command(people_command(home_opt, _settings))
main.add_command(insights_command(home_opt, _settings))
main.add_command(rekey_command(home_opt, _settings))
main.add_command(mcp_command(home_opt, _settings))


if __name__ == "__main__":
    main()
