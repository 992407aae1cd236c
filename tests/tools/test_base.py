"""The tool runner: a tool that exits is a failed call; the user's Ctrl-C still stops the run."""

from __future__ import annotations

import sys

import pytest

from rapo_trl.tools import run_tool_calls


class _Exits:
    tag = "exits"
    timeout = 5.0

    def run(self, text: str) -> str:
        sys.exit(f"tool gave up on {text}")


class _Interrupted:
    tag = "interrupted"
    timeout = 5.0

    def run(self, text: str) -> str:
        raise KeyboardInterrupt


class _Works:
    tag = "works"
    timeout = 5.0

    def run(self, text: str) -> str:
        return text.upper()


def test_system_exit_from_a_tool_is_a_failed_call_not_the_end_of_the_run():
    calls = run_tool_calls([(_Exits(), "x"), (_Works(), "y")])
    assert [call.ok for call in calls] == [False, True]
    assert calls[0].output == "Error: SystemExit: tool gave up on x" and calls[1].output == "Y"


def test_keyboard_interrupt_still_stops_the_run():
    with pytest.raises(KeyboardInterrupt):
        run_tool_calls([(_Interrupted(), "x")])


def test_a_tool_that_ignores_its_timeout_is_given_up_on_and_the_process_still_exits(tmp_path):
    import subprocess
    import textwrap

    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent("""
        import threading
        import rapo_trl.tools.base as base
        base._GRACE_SECONDS = 0.1

        class Hangs:
            tag = "hangs"
            timeout = 0.2

            def run(self, text):
                threading.Event().wait()  # never returns, whatever its timeout says

        class Works:
            tag = "works"
            timeout = 5.0

            def run(self, text):
                return text.upper()

        calls = base.run_tool_calls([(Hangs(), "x"), (Works(), "y")])
        print([call.ok for call in calls], calls[0].output, calls[1].output)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[False, True] Error: tool 'hangs' timed out after 0s Y"


def test_a_call_given_up_on_while_waiting_for_a_slot_never_runs(monkeypatch):
    import threading
    import time

    import rapo_trl.tools.base as base

    monkeypatch.setattr(base, "_GRACE_SECONDS", 0.1)
    release, ran = threading.Event(), []

    class Holds:
        tag, timeout = "holds", 0.1

        def run(self, text):
            release.wait(5)
            return "late"

    class Records:
        tag, timeout = "records", 0.1

        def run(self, text):
            ran.append(text)
            return text

    calls = base.run_tool_calls([(Holds(), "a"), (Records(), "b")], max_workers=1)
    assert [c.ok for c in calls] == [False, False] and "timed out" in calls[1].output
    release.set()  # the slot frees after the policy was told "b" timed out
    time.sleep(0.5)
    assert ran == []  # a call the policy saw time out has no effects later
