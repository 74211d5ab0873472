"""Nothing runs by itself: every sensor and schedule is off until a user turns it on in the UI."""

import dagster as dg

from brb_pipeline.definitions import defs


def test_sensors_and_schedules_are_off_by_default():
    sensors = {s.name: s.default_status for s in defs.sensors}
    assert sensors == {"source_change_sensor": dg.DefaultSensorStatus.STOPPED,
                       "changed_batches_sensor": dg.DefaultSensorStatus.STOPPED,
                       "finalize_sensor": dg.DefaultSensorStatus.STOPPED}
    assert {s.name: s.default_status for s in defs.schedules} == {
        "reingest_schedule": dg.DefaultScheduleStatus.STOPPED}
