"""Issue 46, certified page: every accuracy is of a named classifier and carries its interval, the
figure's caption agrees with what is drawn, curves start at radius 0, a certificate that
certifies nothing at the radii asked is "vacuous at these radii", and certify's default radii
come from what the model certifies.

The sample below is the reviewer's case: a smoothing model whose CERTIFY abstains on 7 of 50
points (conventional accuracy 86 %) while the attacks ran against the vote of 32 draws, which
never abstains (clean accuracy 98 %, robust 92 % at radius 0.25).
"""

from __future__ import annotations

import csv
import re

import matplotlib
import numpy as np
import pytest
from scipy import stats

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from dpaudit.app.runs.certify import DEFAULT_RADII, CertifySpec, chosen_radii
from dpaudit.privacy.audit_stats import clopper_pearson_interval
from dpaudit.results import (
    CertificationResult,
    EvasionResult,
    save_certification_result,
    save_evasion_result,
)
from dpaudit.results.certification import round_down
from dpaudit.results.certify_summary import CertificateReach, smoothing_prediction_rule
from dpaudit.results.verdicts import certified_verdict
from dpaudit.store import RunDir, atomic_write_json
from reports.certified import (
    certified_caption,
    certified_figure,
    certified_rows,
    classifier_table,
    line_style_words,
    load_certified_runs,
    render_certified,
    robust_rows,
    runs_verdict,
)
from tests.reports.conftest import _record
from tests.reports.figure_runs import build_certified_run

N = 50
#: "(pgd, mim: dotted line, open markers; …": the curves a caption names and the look it gives them.
_SAID = r"(?:\(|; )([a-z0-9_, -]+): ([a-z -]+ line(?:, (?:open|filled) markers)?)"
RADII = [0.25, 0.5]
ATTACK_CONFIG = {
    "randomized": True,
    "eval_samples": 32,
    "confirm_samples": 256,
    "confirm_confidence": 0.99,
    "seed": 0,
}


def _exact_ci(k: int, n: int) -> tuple[float, float]:
    """Clopper–Pearson from SciPy's binomial test: a second implementation to check ours against."""
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def _smoothing_run(path, *, point_radius: float | None = None, defense: str = "smoothing") -> RunDir:
    """One model certified at RADII: CERTIFY abstains on 7 points; attacks keep 46 then 40 of 50.

    ``point_radius``: every correct point certified at exactly this radius (Secure-SGD's unanimous
    votes); ``None``: radii spread over [0.3, 1.0].
    """
    run = RunDir(path).create(command="test")
    model_id = _record(run, defense).model_id
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 10, N)
    predictions = labels.copy()
    predictions[:7] = -1  # CERTIFY abstains: counted wrong
    radii = rng.uniform(0.3, 1.0, N) if point_radius is None else np.full(N, point_radius)
    radii[:7] = 0.0
    d = run.certify_dir(model_id)
    own = "smoothing" if defense == "smoothing" else defense
    rule = smoothing_prediction_rule(100) if defense == "smoothing" else "vote-count argmax over the 2000 draws"
    save_certification_result(
        CertificationResult(
            method=own,
            norm="l2",
            labels=labels,
            predictions=predictions,
            radii=radii,
            num_draws=1000,
            confidence=0.999,
            config={"prediction_rule": rule},
        ),
        d,
    )
    success = np.zeros((len(RADII), N), dtype=bool)
    success[:, :1] = True  # the one clean error of the vote
    success[0, 1:4] = True
    success[1, 1:10] = True
    clean = np.ones(N, dtype=bool)
    clean[0] = False
    for attack in ("fgsm", "pgd"):
        save_evasion_result(
            EvasionResult(
                attack=attack,
                norm="l2",
                radii=np.asarray(RADII),
                success=success,
                clean_correct=clean,
                max_perturbation=np.asarray(RADII),
                config=ATTACK_CONFIG,
            ),
            d,
        )
    summary = {
        "model_id": model_id,
        "defense": defense,
        "norm": "l2",
        "radii": RADII,
        "conventional_accuracy": 43 / N,
        "prediction_rule": rule,
        "robust_accuracy": {a: {} for a in ("fgsm", "pgd")},
        "soundness_violations": [],
    }
    if defense == "smoothing":
        summary |= {"mechanism": "smoothing", "noise_std": 0.25}
    atomic_write_json(d / "summary.json", summary)
    return run


# ------------------------------------------------------------------------------------- intervals
@pytest.mark.parametrize("k,n", [(0, 40), (1, 40), (33, 40), (40, 40), (7, 7), (500, 1000)])
def test_clopper_pearson_interval_matches_scipy_and_the_closed_form_edges(k, n):
    low, high = clopper_pearson_interval(k, n, confidence=0.95)
    want = _exact_ci(k, n)
    assert low == pytest.approx(want[0], abs=1e-9) and high == pytest.approx(want[1], abs=1e-9)
    if k == 0:  # closed form: (1 - high)^n = 0.025
        assert high == pytest.approx(1 - 0.025 ** (1 / n)) and low == 0.0
    if k == n:
        assert low == pytest.approx(0.025 ** (1 / n)) and high == 1.0


def test_csv_rows_carry_counts_and_intervals_from_radius_zero(tmp_path):
    runs = load_certified_runs(_smoothing_run(tmp_path / "run"))
    certified, robust = certified_rows(runs), robust_rows(runs)
    for row in certified:
        k, n = row.certified_count, row.num_points
        assert row.certified_accuracy == pytest.approx(k / n)
        assert (row.certified_ci_low, row.certified_ci_high) == pytest.approx(_exact_ci(k, n))
        assert (row.conventional_ci_low, row.conventional_ci_high) == pytest.approx(_exact_ci(43, 50))
    for row in robust:
        k, n = row.robust_count, row.num_examples
        assert (row.robust_ci_low, row.robust_ci_high) == pytest.approx(_exact_ci(k, n))
        assert row.clean_count == 49 and (row.clean_ci_low, row.clean_ci_high) == pytest.approx(_exact_ci(49, 50))
    # Radius 0 leads both tables: the conventional accuracy of CERTIFY (43/50), the vote's clean accuracy (49/50).
    assert [r.radius for r in certified] == [0.0, *RADII]
    assert [r.certified_count for r in certified] == [43, 43, 43 - sum(0.3 <= x < 0.5 for x in _spread()[7:])]
    assert [(r.radius, r.robust_count) for r in robust if r.attack == "pgd"] == [(0.0, 49), (0.25, 46), (0.5, 40)]


def _spread() -> np.ndarray:
    """The radii :func:`_smoothing_run` draws (same seed, same order of draws)."""
    rng = np.random.default_rng(5)
    rng.integers(0, 10, N)
    return rng.uniform(0.3, 1.0, N)


@pytest.mark.extended
def test_page_csv_and_latex_carry_counts_and_intervals(tmp_path):
    run = _smoothing_run(tmp_path / "run")
    written, csv_files = render_certified(run)
    rows = list(csv.DictReader(next(p for p in csv_files if p.name == "certified_accuracy.csv").open()))
    assert {"certified_ci_low", "certified_ci_high", "certified_count", "num_points"} <= set(rows[0])
    robust = list(csv.DictReader(next(p for p in csv_files if p.name == "robust_accuracy.csv").open()))
    assert {"robust_ci_low", "clean_ci_high", "prediction_rule"} <= set(robust[0])
    html = written.html.read_text()
    lo, hi = _exact_ci(43, 50)
    assert "86.0% (43/50)" in html and f"{np.floor(lo * 1000) / 10:.1f}–{np.ceil(hi * 1000) / 10:.1f}%" in html
    assert "98.0% (49/50)" in html and "majority vote of 32 noise draws" in html
    tex = [p for p in written.exports if p.suffix == ".tex" and "accuracy-" in p.name]
    assert tex and "(43/50)" in tex[0].read_text()


# ------------------------------------------------------------------------ named classifiers
def test_each_attack_names_its_classifier_and_its_clean_accuracy(tmp_path):
    run = _smoothing_run(tmp_path / "run")
    (cr,) = load_certified_runs(run)
    table = classifier_table(cr)
    cells = {row[0]: [str(c) for c in row] for row in table.rows}
    # The certificate's rule and the attacked rule are both named, each with its own radius-0 accuracy.
    assert "abstaining where p_A" in cells["certified smoothing"][1] and cells["certified smoothing"][2] == (
        "86.0% (43/50)"
    )
    for attack in ("fgsm", "pgd"):
        rule, acc = cells[f"robust under {attack}"][1:3]
        assert rule == (
            "g by majority vote of 32 noise draws, never abstaining; an error counts only when 256 fresh draws "
            "confirm it at 99%"
        )
        assert acc == "98.0% (49/50)"
    assert {r.prediction_rule for r in robust_rows([cr])} == {cells["robust under pgd"][1]}
    verdict = runs_verdict([cr])
    text = " ".join((verdict.headline, *verdict.lines))
    assert "majority vote of 32" in text and "98.0% (49/50" in text and "abstaining where p_A" in text


# ------------------------------------------------------------------------------------- figure
def test_line_style_words_name_the_drawn_dash_pattern():
    fig, ax = plt.subplots()
    want = {":": "dotted", (0, (1, 1)): "dotted", "--": "dashed", (0, (6, 2)): "dashed", "-.": "dash-dot", "-": "solid"}
    for style, word in want.items():
        (line,) = ax.plot([0, 1], [0, 1], linestyle=style, marker="o", markerfacecolor="none")
        assert line_style_words(line) == f"{word} line, open markers"
    (line,) = ax.plot([0, 1], [0, 1], linestyle="-", marker="o")
    assert line_style_words(line) == "solid line, filled markers"
    plt.close(fig)


@pytest.mark.parametrize("builder", [pytest.param("figure_run", marks=pytest.mark.extended), "smoothing_run"])
def test_curves_start_at_radius_zero_and_the_caption_names_the_drawn_styles(tmp_path, builder):
    run = build_certified_run(tmp_path / "run") if builder == "figure_run" else _smoothing_run(tmp_path / "run")
    for cr in load_certified_runs(run):
        fig = certified_figure(cr)
        ax = fig.axes[0]
        caption = certified_caption(fig)
        said = {
            name: words
            for names, words in re.findall(
                r"(?:\(|; )([a-z0-9_, -]+): ([a-z -]+ line(?:, (?:open|filled) markers)?)", caption
            )
            for name in names.split(", ")
        }
        assert "dodged" not in ax.get_xlabel() and "sideways" not in ax.get_xlabel()
        curves = [c for c in ax.containers]
        assert len(curves) == len(cr.certificates) + len(cr.attacks)
        for c in curves:
            line = c.lines[0]
            kind, name = line.get_gid().split(":", 1)
            x, y = line.get_data()
            assert x[0] == 0.0
            if kind == "certified":
                assert y[0] == pytest.approx(cr.certificates[name].conventional_accuracy)
            else:
                assert y[0] == pytest.approx(cr.attacks[name].clean_accuracy)
            # The caption names this curve with the look it is drawn in, and no other.
            assert said[name] == line_style_words(line), (name, caption)
        styles = {line_style_words(c.lines[0]).split(" line")[0] for c in curves}
        for word in ("solid", "dotted", "dashed", "dash-dot"):
            if f"{word} line" in caption:
                assert word in styles, (word, caption)
        if len(cr.attacks) > 1:
            assert "offset sideways" in caption
        plt.close(fig)


# ------------------------------------------------------------------------------------ verdict
def test_a_certificate_certifying_nothing_at_the_radii_asked_is_vacuous_not_sound(tmp_path):
    run = _smoothing_run(tmp_path / "run", point_radius=0.038, defense="secure-sgd")
    verdict = runs_verdict(load_certified_runs(run))
    assert verdict.status == "vacuous at these radii"
    assert verdict.tone == "warn"
    assert "0.038" in verdict.headline and "0.038" in " ".join(verdict.lines)


def test_a_vacuous_own_certificate_is_not_vouched_for_by_the_smoothing_beside_it():
    # The real Secure-SGD digits model at the old fixed radii: its own certificate 0 % everywhere
    # (largest radius 0.0344), smoothing of its noise 66 % / 41 % at 0.05 / 0.1.
    radii = (0.05, 0.1, 0.15)
    reach = [
        CertificateReach(
            model_id="m", certificate="secure-sgd", radii=radii, certified_accuracy=(0, 0, 0), largest_radius=0.0344
        ),
        CertificateReach(
            model_id="m", certificate="smoothing", radii=radii, certified_accuracy=(0.66, 0.41, 0), largest_radius=0.12
        ),
    ]
    verdict = certified_verdict([("m", [], True)], reach=reach)
    assert verdict.status == "vacuous at these radii" and verdict.tone == "warn"
    assert "secure-sgd" in verdict.headline and "0.0344" in verdict.headline and "smoothing" not in verdict.headline
    assert certified_verdict([("m", [], True)], reach=reach[1:]).status == "sound"


def test_a_certificate_certifying_something_is_sound(tmp_path):
    run = _smoothing_run(tmp_path / "run")
    verdict = runs_verdict(load_certified_runs(run))
    assert verdict.status == "sound" and verdict.tone == "ok"


# ------------------------------------------------------------------------------ default radii
def _certificate(radii: np.ndarray, correct: np.ndarray) -> CertificationResult:
    labels = np.zeros(radii.size, dtype=np.int64)
    predictions = np.where(correct, 0, 1)
    return CertificationResult(
        method="secure-sgd",
        norm="l2",
        labels=labels,
        predictions=predictions,
        radii=radii,
        num_draws=10,
        confidence=0.95,
    )


@pytest.mark.parametrize(
    "radii",
    [
        np.full(60, 0.038),  # Secure-SGD: unanimous votes, one radius on every point
        np.random.default_rng(1).uniform(0, 0.4, 60),
        np.concatenate([np.zeros(55), [0.0012, 0.0013, 0.002, 0.03, 0.29]]),
    ],
)
def test_suggested_radii_start_at_zero_and_certify_something_at_the_smallest(radii):
    correct = np.ones(radii.size, dtype=bool)
    correct[::7] = False
    radii = np.where(correct, radii, 0.0)
    cert = _certificate(radii, correct)
    picked = cert.suggested_radii()
    assert picked[0] == 0.0 and list(picked) == sorted(set(picked)) and len(picked) >= 3
    smallest = picked[1]
    # Brute force: correct points whose certified radius reaches the smallest radius picked.
    assert sum(1 for r, c in zip(radii, correct) if c and r >= smallest) > 0
    assert cert.certified_accuracy([smallest])[0] > 0
    assert max(picked) <= radii[correct].max()


def test_no_certified_point_falls_back_to_zero_and_the_fixed_radii():
    cert = _certificate(np.zeros(10), np.ones(10, dtype=bool))
    assert cert.suggested_radii() == (0.0,)
    radii, source = chosen_radii(cert, None)
    assert radii == (0.0, *DEFAULT_RADII) and "certified no test point" in source


def test_round_down_never_rounds_up():
    for x, want in [(0.29, 0.29), (0.03849, 0.038), (3.81146, 3.8), (0.0001234, 0.00012)]:
        assert round_down(x) == want
    xs = np.random.default_rng(0).uniform(0, 5, 2000)
    assert all(round_down(float(x)) <= x for x in xs)


def test_certify_spec_leaves_radii_to_the_model_when_none_are_given(tmp_path):
    assert CertifySpec(target=tmp_path).radii is None
    assert CertifySpec(target=tmp_path, radii=(0.2, 0.0)).radii == (0.0, 0.2)


@pytest.mark.extended
def test_certify_cli_leaves_radii_to_the_model_when_none_are_given(tmp_path):
    from dpaudit.app.cli import build_parser

    args = build_parser().parse_args(["certify", "--target", str(tmp_path), "--out", str(tmp_path / "o")])
    assert args.radii is None
