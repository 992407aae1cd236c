"""How `rapo` reports errors: a bug in the user's own code keeps the user's frames (file, line, the
raising line) and exits 1; a usage error stays one line, exits 2 and says how to see the traceback."""

from __future__ import annotations

import textwrap

import pytest

from rapo_trl.cli import main
from rapo_trl.cli.errors import UsageError, report, user_frames
from tests.helpers.user_modules import import_fresh

USER_CODE = textwrap.dedent('''
    class Broken:
        tag = "broken"

        def __init__(self):
            raise RuntimeError("my tool blew up")


    def exploding_reward(completions, **kwargs):
        return [1.0 / 0 for _ in completions]
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_code.py").write_text(USER_CODE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("RAPO_TRACEBACK", raising=False)
    import_fresh(monkeypatch, "my_code")
    return tmp_path / "my_code.py"


def test_a_tool_that_raises_shows_the_users_frame(user_module, tiny_model_dir, tmp_path, capsys):
    code = main(["train", "--model_name_or_path", str(tiny_model_dir), "--tools", "my_code.Broken",
                 "--retrieve_prob", "0", "--use_cpu", "--output_dir", str(tmp_path / "out"), "--report_to", "none"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f'File "{user_module}", line 6, in __init__' in err and 'raise RuntimeError("my tool blew up")' in err
    assert "RuntimeError: my tool blew up" in err
    assert err.strip().splitlines()[-1] == ("rapo train: error in your code (my_code.py, line 6, in __init__): "
                                            "RuntimeError: my tool blew up")
    assert "rapo_trl/cli/common.py" not in err  # the user's frames, not ours (RAPO_TRACEBACK=1 shows those)


def test_a_reward_that_raises_names_the_reward_line(user_module, capsys):
    from my_code import exploding_reward

    from rapo_trl.cli.rewards import make_reward

    script = type("Script", (), {"reward": "my_code.exploding_reward"})()
    try:
        make_reward(script)(["a completion"])
    except ZeroDivisionError as error:
        assert make_reward(script) is exploding_reward
        assert user_frames(error)[-1].filename == str(user_module)
        assert report("train", error) == 1
    err = capsys.readouterr().err
    assert f'File "{user_module}", line 10, in ' in err and "return [1.0 / 0 for _ in completions]" in err
    assert err.strip().splitlines()[-1].startswith("rapo train: error in your code (my_code.py, line 10, in ")


def test_a_usage_error_is_one_line_that_says_how_to_see_more(capsys):
    assert report("train", UsageError("no model given")) == 2
    assert report("train", ValueError("bad\n value")) == 2  # raised in rapo_trl or a library: ours, one line
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["rapo train: error: no model given (RAPO_TRACEBACK=1 shows the full traceback)",
                     "rapo train: error: bad value (RAPO_TRACEBACK=1 shows the full traceback)"]
