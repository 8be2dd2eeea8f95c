"""evo capture/verify's program runner on the CPU: the command line is read as Python
reads it (python app.py, app.py, python -m pkg), the program runs as __main__ with its
own argv and exit status, and evo's own argv and path come back; no torch is needed for
any of it (the recording itself: tests/test_program_gpu.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evo.model.program import program_argv, run_program
from genomes.errors import EvoError

APP = """
import sys
print("argv", sys.argv[1:], "main" if __name__ == "__main__" else __name__)
if sys.argv[1:2] == ["fail"]:
    raise ValueError("the program's own error")
if sys.argv[1:2] == ["exit"]:
    sys.exit(int(sys.argv[2]))
"""


@pytest.fixture
def app(tmp_path):
    path = tmp_path / "app.py"
    path.write_text(APP)
    return str(path)


def test_the_command_is_read_as_python_reads_it(app):
    assert program_argv(["--", "python3", app, "a", "-b"]) == ("path", app, [app, "a", "-b"])
    assert program_argv([app]) == ("path", app, [app])
    assert program_argv(["/venv/bin/python3.12", "-m", "pkg.tool", "x"]) == (
        "module", "pkg.tool", ["pkg.tool", "x"])
    tool = str(Path(app).with_name("python_tool.py"))  # a script whose name starts "python"
    Path(tool).write_text("")
    assert program_argv([tool, "a"]) == ("path", tool, [tool, "a"])


@pytest.mark.parametrize("command, says", [
    ([], "no program given"), (["--", "python"], "no program given"),
    (["python", "-m"], "needs a module name"), (["python", "-O", "app.py"], "-O is not supported"),
    (["python", "missing.py"], "missing.py: no such script"),
    (["torchrun", "--nproc-per-node", "2", "app.py"], "torchrun starts several processes.*one rank")])
def test_a_bad_command_is_one_clear_error(command, says):
    with pytest.raises(EvoError, match=says):
        program_argv(command)


def test_the_program_runs_as_main_with_its_argv_and_status(app, capsys):
    argv, path = sys.argv[:], sys.path[:]
    assert run_program(["python", app, "hello"]) == 0
    assert "argv ['hello'] main" in capsys.readouterr().out
    assert run_program([app, "exit", "3"]) == 3
    assert run_program([app, "fail"]) == 1
    err = capsys.readouterr().err
    assert "ValueError: the program's own error" in err and "Traceback" in err
    assert sys.argv == argv and sys.path == path  # evo's own, back


def test_a_module_runs_with_the_working_folder_on_its_path(tmp_path, monkeypatch, capsys):
    (tmp_path / "mytool.py").write_text(APP)
    monkeypatch.chdir(tmp_path)
    assert run_program(["python", "-m", "mytool", "x"]) == 0
    assert "argv ['x'] main" in capsys.readouterr().out


def test_capture_and_verify_say_what_is_missing_before_running_anything(app, tmp_path, capsys):
    from evo.cli import main

    assert main(["capture", "--out", str(tmp_path / "c")]) == 2
    assert "no program given" in capsys.readouterr().err
    assert main(["verify", "--model", str(tmp_path), "--run", str(tmp_path), "--", app]) == 2
    assert "not a run folder" in capsys.readouterr().err
    try:
        import torch  # noqa: F401
    except ImportError:  # this machine: the capture needs torch, and says so
        assert main(["capture", "--out", str(tmp_path / "c"), "--", "python", app]) == 1
        assert "needs PyTorch" in capsys.readouterr().err
        assert not (tmp_path / "c").exists()
        # the Python API as well: evo's error, not a bare ModuleNotFoundError
        import pytest

        import evo
        from genomes.errors import RuntimeFailure

        with pytest.raises(RuntimeFailure, match="evo.capture needs PyTorch"):
            evo.capture(lambda x: x, 1, out=tmp_path / "c")
        assert not (tmp_path / "c").exists()
        with pytest.raises(RuntimeFailure, match="from_triton_call needs PyTorch"):
            evo.from_triton_call(lambda x: x, 1)
