"""The ``brb`` command: :mod:`.app` parses and dispatches; one module per group of commands.

``python -m brb_pipeline.cli`` runs it too. Must not be imported by any other package.
"""
