"""The ``hartflow`` command line: one module per command group, the parser built from one table.

Exit codes (a contract): 0 completed, 3 awaiting input, 1 failed or cancelled, 2 bad input (nothing written).
Every command takes ``--json`` for machines; without it the output is for people.

    _common.py      exit codes, bad input, the one way to emit a result (``--json`` or for people)
    _follow.py      finding a thread's run and following it until it settles
    runs.py         run, reply, cancel
    inspection.py   status, state, events, runs
    threads.py      threads, upload, tools
    memory.py       memory (show, edit, delete, clear, export, import)
    skills.py       skills (list, enable, disable, install, delete)
    processes.py    worker, dev, serve, demo, sandboxes
    parser.py       the command table and the parser built from it
    entry.py        main: run a command, map failures to exit codes
"""

from workers.cli.entry import main, run_command

__all__ = ["main", "run_command"]
