"""Schedules: runs that start themselves, on Temporal Schedules (``book.py``: create, list, pause, trigger, ...;
``spec.py``: when a schedule fires; ``fire.py``: the activity that starts each fire's run)."""
