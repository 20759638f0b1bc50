"""Library warnings go to a log, never into a verb's output (issue 48, item 5).

A real library warning is raised inside a verb — matplotlib's "No artists with labels" from
``legend()`` on an axes without labels, the kind that leaked into ``compare``'s output — and the
verb's stdout and stderr must not contain it; ``--debug`` shows it, marked as a library warning.
dpaudit's own warnings (addressed to the user) are still shown.
"""

from __future__ import annotations

import argparse
import warnings

import pytest

import dpaudit.app.verbs.epsilon as epsilon_verb
from dpaudit.app.cli import main
from dpaudit.app.library_warnings import is_own_code

#: A verb that computes in well under a second.
GAUSSIAN = ["epsilon", "--mechanism", "gaussian", "--target-epsilon", "1", "--delta", "1e-5"]


def _legend_without_labels() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.legend()  # matplotlib warns: no artists with labels
    plt.close(fig)


@pytest.fixture
def warning_verb(monkeypatch: pytest.MonkeyPatch) -> None:
    real = epsilon_verb._cmd_epsilon

    def noisy(args: argparse.Namespace) -> int:
        _legend_without_labels()
        # As if raised by dpaudit's own code (the verb's module): addressed to the user, still shown.
        warnings.warn_explicit("a dpaudit warning for the user", UserWarning, epsilon_verb.__file__, 1)
        return real(args)

    monkeypatch.setattr(epsilon_verb, "_cmd_epsilon", noisy)
    # Every occurrence is shown, so the test does not depend on what ran before it.
    monkeypatch.setattr(warnings, "filters", [("always", None, Warning, None, 0)])


@pytest.mark.extended  # matplotlib's import and two runs of the verb: seconds
def test_a_library_warning_is_not_in_a_verbs_output(warning_verb, capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings(record=True) as seen:  # the same code outside the verb does warn
        warnings.simplefilter("always")
        _legend_without_labels()
    assert any("No artists with labels" in str(w.message) for w in seen)
    with warnings.catch_warnings(record=True) as shown:  # what Python's own display received
        warnings.simplefilter("always")
        assert main(GAUSSIAN) == 0
    out, err = capsys.readouterr()
    assert "No artists with labels" not in out + err and "UserWarning" not in out
    assert [str(w.message) for w in shown] == ["a dpaudit warning for the user"]  # dpaudit's own: displayed
    assert main(["--debug", *GAUSSIAN]) == 0
    out, err = capsys.readouterr()
    assert "No artists with labels" not in out
    assert "library warning:" in err and "No artists with labels" in err


def test_own_code_is_told_from_libraries() -> None:
    import matplotlib

    import dpaudit.app.cli as cli

    assert is_own_code(cli.__file__) and not is_own_code(matplotlib.__file__)
