"""``dpaudit audit``'s games and ``dpaudit certify``'s default attacks are read from the registries (issue 32).

``--threat``/``--method`` list the games of :data:`attacks.audit.procedures.AUDIT_PROCEDURES`
and ``certify --attack`` defaults to every attack of :data:`attacks.evasion.EVASION_ATTACKS`,
both read when the parser is built: a part registered since import is offered with no edit
to the verbs, and one removed is no longer offered.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from attacks.audit.procedures import AUDIT_PROCEDURES, AuditProcedureSpec
from attacks.evasion import EVASION_ATTACKS
from dpaudit.app.cli import build_parser


def _help(capsys: pytest.CaptureFixture[str], *verb: str) -> str:
    """The verb's ``--help``, whitespace collapsed (the formatter wraps at the terminal width)."""
    with pytest.raises(SystemExit) as exit_:
        build_parser([*verb, "--help"]).parse_args([*verb, "--help"])
    assert exit_.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def _toy_game(**_: Any) -> Any:
    raise AssertionError("the parser never plays a game")


def test_the_audit_games_are_the_registered_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from dpaudit.app.runs.audit import METHODS, THREATS

    # The registry's order, and the texts users saw before the lists were generated.
    assert (THREATS, METHODS) == (("black-box", "white-box"), ("multi-run", "one-run"))
    out = _help(capsys, "audit")
    assert "--threat {black-box,white-box}" in out and "--method {multi-run,one-run}" in out
    toy = AuditProcedureSpec(name="toy-game", summary="a toy black-box game", threat="black-box", run=_toy_game)
    with AUDIT_PROCEDURES.temporarily(toy):
        assert "--method {multi-run,one-run,toy-game}" in _help(capsys, "audit")
        args = build_parser(["audit"]).parse_args(["audit", "--method", "toy-game", "--out", str(tmp_path)])
        assert args.method == "toy-game"
    assert "toy-game" not in _help(capsys, "audit")


def test_certify_attacks_every_registered_evasion_attack_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--attack NAMES attacks, comma separated (default fgsm,ifgsm,pgd,mim)" in _help(capsys, "certify")
    with EVASION_ATTACKS.temporarily(dataclasses.replace(EVASION_ATTACKS["fgsm"], name="toy-evasion")):
        assert "(default fgsm,ifgsm,pgd,mim,toy-evasion)" in _help(capsys, "certify")
    assert "toy-evasion" not in _help(capsys, "certify")
