"""Configuration: every setting and every file location, each declared once.

- :mod:`.settings`: :class:`~.settings.Settings` and how a run's values are found (flags >
  ``BRB_*`` > ``<home>/config.json`` > defaults);
- :mod:`.home`: where every file lives under the home dir and in its Dagster instance.

Must not import: dagster, ``stages``, ``orchestration``, ``cli``, ``search``, ``privacy``.
"""
