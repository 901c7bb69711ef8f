"""Files an attacker (or an accident) hands the readers: a FIFO, a device or a socket is
refused at once with a message naming it (none blocks the CLI), and one number out of the
range of a double costs its one value, not the whole file."""

import json
import os
import socket
import time

import pytest

from conftest import run_cli


def special_files(tmp_path):
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    sock_path = tmp_path / "metrics.jsonl"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    return sock, [(fifo, "a FIFO (named pipe)"), (sock_path, "a socket"), ("/dev/zero", "a character device")]


@pytest.mark.parametrize("command", [["diagnose"], ["report"], ["export"], ["show"], ["import", "--out", "OUT"],
                                     ["import", "--format", "csv", "--out", "OUT"],
                                     ["import", "--format", "jsonl", "--out", "OUT"]],
                         ids=lambda c: " ".join(c))
def test_a_file_that_is_not_regular_is_refused_without_blocking(tmp_path, command):
    sock, files = special_files(tmp_path)
    try:
        for path, kind in files:
            args = [str(tmp_path / "out") if a == "OUT" else a for a in command]
            started = time.monotonic()
            result = run_cli(*args[:1], path, *args[1:])
            assert time.monotonic() - started < 30
            assert result.returncode == 2, (path, result.stdout, result.stderr)
            assert f"{path}: {kind}, not a regular file: expected a log file" in result.stderr, result.stderr
            assert not (tmp_path / "out").exists()
    finally:
        sock.close()


def test_one_number_out_of_range_in_a_trainer_state_costs_one_value(tmp_path):
    history = [{"step": s, "loss": 1.0 / (s + 1), "learning_rate": 0.1} for s in range(1, 6)]
    text = json.dumps({"global_step": 5, "log_history": history})
    text = text.replace('"loss": 0.25', '"loss": 1e309', 1)  # step 3's loss
    state = tmp_path / "trainer_state.json"
    state.write_text(text)
    result = run_cli("import", state, "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert 'log_history[2]: "loss": 1e309 is out of the range of a double; value skipped' in result.stderr
    import trainscope as ts
    view = ts.open_run(tmp_path / "run")
    assert list(view.scalars("loss")["step"]) == [1, 2, 4, 5]
    assert list(view.scalars("learning_rate")["step"]) == [1, 2, 3, 4, 5]


def test_one_number_out_of_range_in_a_jsonl_line_costs_one_value(tmp_path):
    lines = [json.dumps({"step": s, "loss": 1.0, "acc": 0.5}) for s in range(4)]
    lines[1] = '{"step": 1, "loss": -2e400, "acc": 0.5}'
    log = tmp_path / "metrics.jsonl"
    log.write_text("\n".join(lines) + "\n")
    result = run_cli("import", log, "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert '"loss": -2e400 is out of the range of a double; value skipped' in result.stderr
    import trainscope as ts
    view = ts.open_run(tmp_path / "run")
    assert list(view.scalars("loss")["step"]) == [0, 2, 3]
    assert list(view.scalars("acc")["step"]) == [0, 1, 2, 3]
