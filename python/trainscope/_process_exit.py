"""Ending every live run cleanly however the process ends: normal exit, an uncaught
exception, SIGINT, SIGTERM."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import weakref

live_runs = weakref.WeakSet()  # the runs not finished yet
_exit_reason: list[str] = []  # why the interpreter is going down, if not cleanly

_handlers_installed = False


def _finish_all(status, reason):
    for run in list(live_runs):
        try:
            run.finish(status, reason)
        except Exception as error:
            print(f"trainscope: could not close run {run.name}: {error}", file=sys.stderr)


def _at_exit():
    if _exit_reason:
        _finish_all("crashed", _exit_reason[0])
    else:
        _finish_all("finished", "")


def install_exit_handlers():
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_at_exit)

    previous_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        _exit_reason.append(exc_type.__name__)  # KeyboardInterrupt for Ctrl-C
        for run in list(live_runs):  # the message too (meta "exception"), for the dashboard
            run._recorder.set_meta("exception", f"{exc_type.__name__}: {exc}")
        previous_hook(exc_type, exc, tb)

    sys.excepthook = excepthook

    # SIGTERM ends Python without atexit; close the runs, then die of the signal as asked.
    # Only where nobody else handles it, and only from the main thread (Python's rule).
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass


def _on_sigterm(signum, frame):
    # A run whose finish() the signal interrupted (an exception's exit, the script's own
    # finish(); the handler runs on that thread, between two of its lines) is not finished by
    # _finish_all, and the kill below would cut it short before its store is written (a rank
    # that torchrun terminates while it closes after a peer's death lost every point): its
    # store is closed here, at once (the recorder's close is idempotent).
    for run in list(live_runs):
        if run._finished:
            try:
                run._recorder.close("crashed", "SIGTERM")
            except Exception as error:
                print(f"trainscope: could not close run {run.name}: {error}", file=sys.stderr)
    _finish_all("crashed", "SIGTERM")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
