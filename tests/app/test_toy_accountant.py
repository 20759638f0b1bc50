"""An accountant defined in a module of its own is found everywhere, with no edit elsewhere.

The toy accountant lives in a temporary module written by this test; importing it registers it
with ``ACCOUNTANTS.register(...)`` (as each built-in accountant registers itself under
``dpaudit.privacy.accounting``), and the teardown unregisters it. Nothing else is told about it,
yet it is a choice of ``dpaudit epsilon --accountant`` (and in ``--help``), evaluates through
the API and a DP-SGD claim's by-accountant bounds where it supports the event, declines where
its ``supports`` says it cannot, and is among the accountants the soundness suite checks, whose
independent references it passes.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from dpaudit.app.cli import main
from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec

MODULE = "dpaudit_toy_accountant"

TOY_SOURCE = '''
"""A toy accountant: zero-concentrated DP of un-sampled Gaussian steps (Bun & Steinke 2016).

One Gaussian step of sensitivity 1 and noise multiplier σ is 1/(2σ²)-zCDP (their Proposition
1.6); ρ adds under composition (Lemma 1.7) and ρ-zCDP gives (ρ + 2√(ρ ln(1/δ)), δ)-DP
(Proposition 1.3). No amplification by sampling is known to it, so it declines sampled steps.
"""

import math

from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec


def _rho(event, count=1):
    kind = type(event).__name__
    if kind == "NoOpDpEvent":
        return 0.0
    if kind == "GaussianDpEvent":
        return count / (2.0 * float(event.noise_multiplier) ** 2)
    if kind == "SelfComposedDpEvent":
        return _rho(event.event, count * int(event.count))
    if kind == "ComposedDpEvent":
        return sum(_rho(e, count) for e in event.events)
    raise LookupError(f"zCDP of {kind} is not known to the toy")


def decline(event, neighbouring):
    if neighbouring != "add_or_remove_one":
        return f"it bounds add_or_remove_one only, got {neighbouring}"
    try:
        _rho(event)
    except LookupError as exc:
        return str(exc)
    return ""


def epsilon(event, delta, neighbouring):
    rho = _rho(event)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def delta(event, epsilon, neighbouring):
    rho = _rho(event)  # the conversion above solved for δ
    if rho == 0.0:
        return 0.0
    return 1.0 if epsilon <= rho else math.exp(-((epsilon - rho) ** 2) / (4.0 * rho))


TOY = ACCOUNTANTS.register(
    AccountantSpec(
        name="toy",
        display="zCDP (toy)",
        summary="zCDP of un-sampled Gaussian steps (Bun & Steinke 2016)",
        decline=decline,
        epsilon=epsilon,
        delta=delta,
    )
)
'''


def _import_toy(directory: Path) -> ModuleType:
    path = directory / f"{MODULE}.py"
    path.write_text(textwrap.dedent(TOY_SOURCE))
    spec = importlib.util.spec_from_file_location(MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AccountantSpec]:
    assert "toy" not in ACCOUNTANTS
    module = _import_toy(tmp_path_factory.mktemp("toy-accountant"))
    try:
        yield module.TOY
    finally:
        ACCOUNTANTS.unregister("toy")
        sys.modules.pop(MODULE, None)
    assert "toy" not in ACCOUNTANTS


def _zcdp_epsilon(sigma: float, steps: int, delta: float) -> float:
    # Written out here from Bun & Steinke (2016), Propositions 1.3 and 1.6, not read from the toy.
    rho = steps / (2.0 * sigma**2)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def test_the_registration_is_the_modules_own(toy: AccountantSpec) -> None:
    assert ACCOUNTANTS["toy"] is toy and toy.epsilon.__module__ == MODULE
    assert ACCOUNTANTS.names()[-1] == "toy"  # listed after every built-in accountant


def test_toy_accountant_in_the_api(toy: AccountantSpec) -> None:
    from dpaudit import api
    from dpaudit.privacy.accountants import AccountantDeclined, compute_delta, compute_epsilon
    from dpaudit.privacy.claims import dpsgd_claim
    from dpaudit.privacy.events import sampled_gaussian_event

    assert "toy" in api.ACCOUNTANTS
    plain = sampled_gaussian_event(sampling_rate=1.0, noise_multiplier=2.0, num_steps=10)
    assert toy.supports(plain) and compute_epsilon(plain, delta=1e-5, accountant="toy") == pytest.approx(
        _zcdp_epsilon(2.0, 10, 1e-5), rel=1e-12
    )
    assert compute_delta(plain, epsilon=_zcdp_epsilon(2.0, 10, 1e-5), accountant="toy") == pytest.approx(1e-5, rel=1e-9)
    sampled = sampled_gaussian_event(sampling_rate=0.01, noise_multiplier=2.0, num_steps=10)
    assert not toy.supports(sampled)
    with pytest.raises(AccountantDeclined, match="toy.*PoissonSampledDpEvent"):
        compute_epsilon(sampled, delta=1e-5, accountant="toy")
    # A claim's bounds take every registered accountant that supports its event (σ = 5 keeps PLD's grid small).
    bound = dpsgd_claim(sampling_rate=1.0, noise_multiplier=5.0, num_steps=2).upper_bound(delta=1e-5)
    assert list(bound.by_accountant)[-1] == "toy" and bound.by_accountant["toy"] == pytest.approx(
        _zcdp_epsilon(5.0, 2, 1e-5), rel=1e-12
    )
    assert (
        "toy"
        not in dpsgd_claim(sampling_rate=0.5, noise_multiplier=5.0, num_steps=1).upper_bound(delta=1e-5).by_accountant
    )


def test_toy_accountant_on_the_command_line(toy: AccountantSpec, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["epsilon", "--help"])
    assert exc.value.code == 0 and "{moments,rdp,pld,strong,naive,toy,all}" in capsys.readouterr().out
    base = ["epsilon", "--noise-multiplier", "2", "--num-steps", "10", "--delta", "1e-5", "--json"]
    assert main([*base, "--sampling-rate", "1", "--accountant", "toy"]) == 0
    assert json.loads(capsys.readouterr().out)["toy"] == pytest.approx(_zcdp_epsilon(2.0, 10, 1e-5), rel=1e-12)
    assert main([*base, "--sampling-rate", "0.01", "--accountant", "all"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "toy" not in data and data["notes"]["toy"].startswith("declined: ") and "moments" in data


def test_toy_accountant_is_in_the_soundness_suite_and_passes_it(
    toy: AccountantSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(
        str(Path(__file__).parents[1] / "soundness")
    )  # importlib mode keeps tests/ off sys.path
    from test_accountants import check_accountant, registered_accountants

    assert "toy" in registered_accountants()  # what the suite's parametrisation reads at collection
    for q, sigma, steps, delta in [(1.0, 2.0, 3, 1e-5), (1.0, 0.5, 12, 1e-10), (1.0, 5.0, 1, 0.1), (0.1, 1.0, 5, 1e-5)]:
        check_accountant("toy", q, sigma, steps, delta, interval=1e-2, memory_budget=math.inf)


def test_unknown_accountant_names_the_registered_ones(toy: AccountantSpec) -> None:
    from dpaudit.privacy.accountants import compute_epsilon
    from dpaudit.privacy.events import sampled_gaussian_event

    with pytest.raises(ValueError, match="accountant must be one of moments, rdp, pld, strong, naive, toy; got 'toyy'"):
        compute_epsilon(
            sampled_gaussian_event(sampling_rate=1.0, noise_multiplier=2.0, num_steps=1), delta=1e-5, accountant="toyy"
        )
