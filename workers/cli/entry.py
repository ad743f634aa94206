"""The entry point: parse, run the command, and turn every failure into its exit code and one line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, NoReturn

from temporalio.service import RPCError, RPCStatusCode

from activities.storage import StorageConfigError, StorageError
from workers import telemetry
from workers.cli._common import EXIT_BAD_INPUT, EXIT_FAILED, BadInput, config_of
from workers.cli.parser import build_parser
from workers.config import ConfigError
from workers.devserver import DevServerError
from workers.devserver_options import TemporalCliNotFound
from workers.process_exit import hard_exit
from workers.stack import TemporalUnreachable


def run_command(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.handler(args)
        if asyncio.iscoroutine(result):
            return _run_async(result)
        return int(result)
    except (BadInput, ConfigError, StorageConfigError) as exc:
        _fail(args, str(exc))
        return EXIT_BAD_INPUT
    except (DevServerError, TemporalCliNotFound) as exc:
        _fail(args, f"cannot start the embedded Temporal server: {exc}")
        return EXIT_FAILED
    except StorageError as exc:
        _fail(args, f"storage unavailable: {exc}")
        return EXIT_FAILED
    except TemporalUnreachable as exc:
        _fail(args, str(exc))
        return EXIT_FAILED
    except RPCError as exc:
        _fail(args, f"Temporal server at {_server_of(args)}: {exc.message}{_rpc_hint(exc)}")
        return EXIT_FAILED
    except Exception as exc:  # a bug or an outage we did not foresee: still one line, never a traceback
        _fail(args, f"{type(exc).__name__}: {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted; runs are durable — see them again with: hartflow status THREAD", file=sys.stderr)
        return 130
    finally:
        telemetry.flush()


def _run_async(command: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run``, except after Ctrl-C: the command is cancelled (its Stack stops the worker and the server)
    and the loop is left as it is. Closing it would wait for every task, and a worker task waits for a tool that a
    sync activity cannot be interrupted in; the run is durable, and :func:`main` ends the process at once."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    main_task = loop.create_task(command)
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        main_task.cancel()

    # Only where Ctrl-C would raise KeyboardInterrupt anyway: a job started in the background keeps ignoring it.
    catch = threading.current_thread() is threading.main_thread()
    catch = catch and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if catch:
        loop.add_signal_handler(signal.SIGINT, interrupt)
    try:
        return int(loop.run_until_complete(main_task))
    except BaseException:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        if catch:
            loop.remove_signal_handler(signal.SIGINT)
        if not interrupted:
            _close_loop(loop)


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """What ``asyncio.run`` does on the way out: cancel the tasks left, then close."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.run_until_complete(loop.shutdown_default_executor())
    asyncio.set_event_loop(None)
    loop.close()


def _server_of(args: argparse.Namespace) -> str:
    with contextlib.suppress(Exception):
        temporal = config_of(args).temporal
        return temporal.address or f"127.0.0.1:{temporal.embedded_port}"
    return "?"


def _rpc_hint(exc: RPCError) -> str:
    """What to do when nothing serves the task queue: a query waits for a worker until the server gives up."""
    # A passed query deadline is CANCELLED ("Timeout expired") from the client, DEADLINE_EXCEEDED from the server.
    timed_out = exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED)
    if "no poller" in exc.message or timed_out:
        return " (no worker answered for the task queue: start one with `hartflow worker`)"
    return ""


def _fail(args: argparse.Namespace, message: str) -> None:
    line = message.splitlines()[0] if message else "error"
    if getattr(args, "json", False) or getattr(args, "events", False):
        print(json.dumps({"error": line}))
    print(f"hartflow: error: {line}", file=sys.stderr)


def main(argv: list[str] | None = None) -> NoReturn:
    hard_exit(run_command(argv))
