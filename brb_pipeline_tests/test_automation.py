"""Nothing runs by itself: every sensor and schedule is off until a user turns it on in the UI; the
source sensor watches Mail's index only when Mail is on."""

import dagster as dg

from brb_pipeline.orchestration.definitions import defs


def test_sensors_and_schedules_are_off_by_default():
    sensors = {s.name: s.default_status for s in defs.sensors}
    assert sensors == {"source_change_sensor": dg.DefaultSensorStatus.STOPPED,
                       "changed_batches_sensor": dg.DefaultSensorStatus.STOPPED,
                       "finalize_sensor": dg.DefaultSensorStatus.STOPPED}
    assert {s.name: s.default_status for s in defs.schedules} == {
        "reingest_schedule": dg.DefaultScheduleStatus.STOPPED}


def _source_sensor(s, monkeypatch, cursor=None):
    from brb_pipeline.orchestration.definitions import defs

    s.save()
    monkeypatch.setenv("BRB_HOME", str(s.home))
    with dg.instance_for_test() as instance:
        return defs.get_sensor_def("source_change_sensor")(dg.build_sensor_context(instance=instance, cursor=cursor))


def _new_mail(index) -> None:
    import sqlite3

    con = sqlite3.connect(index)
    con.execute("INSERT INTO subjects (subject) VALUES ('a new message arrived')")
    con.commit()
    con.close()


def test_source_sensor_watches_mail_only_when_it_is_on(tmp_path, monkeypatch, make_chatdb):
    from brb_pipeline.demo.mail_writer import OWNER, MailRecord, rfc822, write_mail_store
    from brb_pipeline.config.settings import Settings

    from brb_pipeline_tests.helpers import T0

    ana = ("Ana", "ana@example.org")
    index = write_mail_store(tmp_path / "Mail", [MailRecord(1, "INBOX", ana, [OWNER], "Hi", T0,
                                                            rfc822(ana, [OWNER], "Hi", T0, "Lunch?"))])
    b = make_chatdb()
    h = b.add_handle("+16175550100")
    b.add_message(b.add_chat([h]), h, "hello", ts=T0)
    chat_db = b.close()
    on = Settings(home=tmp_path / "on", chat_db=chat_db, mail_dir=tmp_path / "Mail", mail_enabled=True)
    first = _source_sensor(on, monkeypatch)
    assert isinstance(first, dg.RunRequest) and "mail=" in first.run_key
    assert isinstance(_source_sensor(on, monkeypatch, first.run_key), dg.SkipReason)  # nothing changed
    off = Settings(home=tmp_path / "off", chat_db=chat_db, mail_dir=tmp_path / "Mail", mail_enabled=False)
    off_first = _source_sensor(off, monkeypatch)
    assert isinstance(off_first, dg.RunRequest) and "mail=" not in off_first.run_key
    _new_mail(index)  # new mail: an ingestion when Mail is on, nothing when it is off
    again = _source_sensor(on, monkeypatch, first.run_key)
    assert isinstance(again, dg.RunRequest) and again.run_key != first.run_key
    assert isinstance(_source_sensor(off, monkeypatch, off_first.run_key), dg.SkipReason)
    # a Mail folder that lost its index reads as missing, not as an error
    index.unlink()
    gone = _source_sensor(on, monkeypatch, again.run_key)
    assert isinstance(gone, dg.RunRequest) and gone.run_key.endswith("mail=missing")
