"""The report verb's renderer: every stored result rendered, linked from an index, torch-free."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from dpaudit.app.runs.report import NothingToRender, ReportIndex, render_reports
from dpaudit.results import MembershipResult
from dpaudit.store import RunDir
from tests.reports.conftest import DP_MODEL, HGM_MODEL


@pytest.mark.extended
def test_renders_every_kind_and_the_index_links_every_page(full_run):
    index = render_reports(full_run)
    assert isinstance(index, ReportIndex)
    assert [p.name for p in index.audits] == ["audit-multi.html"]
    assert [p.name for p in index.membership] == [f"membership-{DP_MODEL}.html"]
    assert [p.name for p in index.certified] == ["certified.html"]
    html = index.index_html.read_text()
    md = index.index_md.read_text()
    for page in index.pages:
        assert page.is_file() and page.with_suffix(".md").is_file()
        assert f'href="{page.name}"' in html
        assert f"({page.with_suffix('.md').name})" in md
    for table in index.tables:
        assert f'href="{table.name}"' in html
    # Every image a page shows exists beside it.
    for page in index.pages:
        for src in re.findall(r'<img src="([^"]+)"', page.read_text()):
            assert (page.parent / src).stat().st_size > 1000


@pytest.mark.extended
def test_every_report_shows_epsilon_under_every_accountant(full_run):
    index = render_reports(full_run)
    audit = index.audits[0].read_text()
    membership = index.membership[0].read_text()
    for name in ("moments", "rdp", "pld", "strong"):
        assert f"<td>{name}" in audit or f'<td class="t">{name}' in audit
        assert f'<td class="t">{name}' in membership
    certified = index.certified[0].read_text()
    assert "No accountant applies to this claim" in certified  # the HGM record claims no DP mechanism


@pytest.mark.extended
def test_membership_report_has_auc_and_tpr_at_fpr(full_run):
    page = render_reports(full_run).membership[0].read_text()
    assert "AUC" in page and "TPR @ 0.1% FPR" in page and "TPR @ 1.0% FPR" in page and "<img" in page


def test_nothing_to_render_is_a_clear_error(tmp_path):
    # A run with a record renders since issue 34 (the trained-model page); one with nothing at all does not.
    run = RunDir(tmp_path / "run").create(command="test")
    with pytest.raises(
        NothingToRender,
        match="holds no trained model and no audit, membership-attack, certify, PATE, DSSGD or model-inversion results",
    ):
        render_reports(run)


@pytest.mark.extended
def test_report_verb_exit_codes(make_run, full_run, tmp_path, capsys):
    from dpaudit.app.cli import main

    assert main(["report", str(full_run.path)]) == 0
    assert str(full_run.reports_dir() / "index.html") in capsys.readouterr().out
    empty = RunDir(tmp_path / "empty").create(command="test")  # a record alone renders since issue 34
    assert main(["report", str(empty.path)]) == 2
    assert "holds no trained model" in capsys.readouterr().err


@pytest.mark.extended
def test_rendering_imports_no_torch(make_run, tmp_path):
    # The pages are rendered by reports/ alone, from stored results: every kind's load and render
    # import no torch. (dpaudit report itself loads the defense registry first, to verify each
    # record as attack does, and hands the pages what the parts declare — their files, report
    # kinds and looks — as torch-free values; the rendering after it needs no part.)
    from dpaudit.parts import catalogue_from_registries

    make_run(tmp_path / "run")
    catalogue = catalogue_from_registries()
    assert catalogue.styles["dpsgd"].colour == "#D55E00" and catalogue.defenses["pate"].report_kind == "pate"
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dpaudit.parts import Artefact, DefenseDeclaration, PartCatalogue, PlotStyle, using_parts\n"
        "from dpaudit.store import RunDir\n"
        "from reports.kinds import ordered_kinds\n"
        f"run = RunDir({str(tmp_path / 'run')!r})\n"
        f"catalogue = {catalogue!r}\n"
        "with using_parts(catalogue):\n"
        "    pages = [kind.render(item, run.reports_dir()) for kind in ordered_kinds() for item in kind.load(run)]\n"
        "assert pages\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'attacks', 'defenses'))\n"
        "assert not bad, bad[:5]\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "MPLBACKEND": "Agg"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_reports_package_imports_only_result_types():
    root = Path(__file__).resolve().parents[2] / "reports"
    for path in root.glob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(from|import) (torch|attacks|defenses)\b", text, re.M), path.name


@pytest.mark.extended
def test_files_are_0644_under_umask_022(make_run, tmp_path):
    make_run(tmp_path / "run")
    code = (
        "import os\nos.umask(0o022)\nfrom dpaudit.app.runs.report import "
        f"render_reports\nrender_reports({str(tmp_path / 'run')!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "MPLBACKEND": "Agg"})
    files = list((tmp_path / "run" / "reports").iterdir())
    assert files
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o644, f.name


@pytest.mark.extended
def test_csv_has_content_or_is_absent(make_run, tmp_path):
    # The DP record has an ε: accuracy_vs_epsilon.csv is written with rows.
    with_eps = render_reports(make_run(tmp_path / "a"))
    names = {p.name for p in with_eps.tables}
    assert "accuracy_vs_epsilon.csv" in names
    for p in with_eps.tables:
        assert len(p.read_text().splitlines()) >= 2, p.name
    # A record with an ε and no curve to draw (one ε per defense): the page must not deny the ε its
    # table gives (the second review's Secure-SGD page said "no record ... has a finite DP ε").
    text = with_eps.certified[0].read_text()
    assert "no record in this run has a finite DP ε" not in text and "one DP ε per defense" in text
    # Only an HGM record (no ε) and no attacks: no accuracy_vs_epsilon.csv, no robust_accuracy.csv.
    run = make_run(tmp_path / "b", audits=False, membership=False)
    (run.record_dir(DP_MODEL) / "record.json").unlink()
    for p in run.certify_dir(HGM_MODEL).glob("evasion-*"):
        p.unlink()
    index = render_reports(run)
    assert {p.name for p in index.tables} == {"certified_accuracy.csv"}
    assert not (run.reports_dir() / "accuracy_vs_epsilon.csv").exists()
    assert "accuracy_vs_epsilon.csv" not in index.index_html.read_text()
    page = index.certified[0].read_text()
    assert "no record in this run has a finite DP ε" in page


def test_nothing_to_draw_is_said_in_words(make_run, tmp_path):
    run = make_run(tmp_path / "run", audits=False, membership=False)
    d = run.certify_dir(HGM_MODEL)
    for p in [*d.glob("certify-*"), *d.glob("evasion-*")]:
        p.unlink()
    page = render_reports(run).certified[0].read_text()
    assert "no model in this run holds a certificate" in page
    assert "no certificate and no attack result stored for this model" in page
    assert "certified-comparison.png" not in page and not (run.reports_dir() / "certified-comparison.png").exists()


def test_empty_figure_is_written_as_words(tmp_path):
    from reports.render import Figure as Block
    from reports.render import Section, write_report_files

    fig = Figure()
    fig.add_subplot(1, 1, 1)  # axes with nothing drawn
    written = write_report_files(
        tmp_path,
        [Section(title="s", blocks=[Block(figure=fig, name="x", caption="A plot", empty="nothing here")])],
        title="t",
        stem="r",
    )
    assert (
        written.figures == ()
        and "A plot: nothing here." in written.html.read_text()
        and "<img" not in written.html.read_text()
    )


def test_membership_roc_legend_outside_and_fixed_colours():
    from reports.figures import colour
    from reports.membership import plot_roc

    n = 100
    member = np.arange(n) < 50
    rs = [
        MembershipResult(
            attack=a, model_id="m", sample_ids=np.arange(n), scores=np.linspace(0, 1, n) + member, is_member=member
        )
        for a in ("loss", "lira")
    ]
    for order in (rs, rs[::-1]):
        fig = plot_roc(order)
        ax = fig.axes[0]
        lines = {line.get_label().split(" ")[0]: line for line in ax.get_lines()}
        assert lines["loss"].get_color() == colour("loss") and lines["lira"].get_color() == colour("lira")
        assert lines["loss"].get_marker() != lines["lira"].get_marker()
        legend = ax.get_legend()
        assert legend is not None and legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1 - 1e-6
    assert plot_roc([]) is None


def test_palette_is_fixed_and_distinct():
    from reports.figures import colour, style

    methods = [
        "pixeldp",
        "agm",
        "hgm",
        "secure-sgd",
        "smoothing",
        "fgsm",
        "ifgsm",
        "pgd",
        "mim",
        "loss",
        "lira",
        "rmia",
        "shadow",
    ]
    assert len({colour(m) for m in methods}) == len(methods)
    assert colour("PGD") == colour("pgd") and colour("unknown-method") == colour("unknown-method")
    evasion = [style(m) for m in ("fgsm", "ifgsm", "pgd", "mim")]
    assert len({str(s["linestyle"]) for s in evasion}) == 4 and len({s["marker"] for s in evasion}) == 4


@pytest.mark.extended
def test_stored_soundness_violation_is_shown_and_exits_3(make_run, tmp_path, capsys):
    from dpaudit.app.cli import main
    from dpaudit.store import atomic_write_json, read_json

    run = make_run(tmp_path / "run", audits=False, membership=False)
    path = run.certify_dir(HGM_MODEL) / "summary.json"
    summary = read_json(path)
    summary["soundness_violations"] = [
        {"certificate": "hgm", "radius": 0.3, "certified_accuracy": 0.9, "robust_accuracy": 0.5}
    ]
    atomic_write_json(path, summary)
    assert main(["report", str(run.path)]) == 3
    page = (run.reports_dir() / "certified.html").read_text()
    # Issue 34: the verdict is the page's box (alert tone, status "unsound"), accuracies as percentages.
    assert (
        'class="verdict verdict-alert"' in page
        and ">unsound<" in page
        and "hgm at radius 0.3 certifies 90.0% &gt; 50.0% the attacks left" in page
    )
    assert "soundness violation" in capsys.readouterr().out


@pytest.mark.extended
def test_audit_report_plots_epsilon_lb_and_its_ceiling_against_the_trials(make_run, tmp_path):
    """Issue 15, item 4: the ceiling beside ε_LB, in the table and against the number of trials."""
    from dpaudit.privacy.audit_procedures import audit_from_one_run, audit_from_scores
    from dpaudit.privacy.claims import dpsgd_claim
    from dpaudit.results.audit import save_audit_result
    from dpaudit.store import atomic_save_npz

    run = make_run(tmp_path / "run", membership=False, certify=False)  # "multi": an older result without a ceiling
    claim = dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100)
    rng = np.random.default_rng(0)
    s_in, s_out = rng.normal(1.5, 1, 100), rng.normal(0, 1, 100)
    d = run.audit_dir("fresh")
    save_audit_result(audit_from_scores(s_in, s_out, claim=claim, delta=1e-5, bound="clopper-pearson"), d)
    atomic_save_npz(d / "scores.npz", in_scores=s_in, out_scores=s_out)
    inc = rng.random(200) < 0.5
    scores = rng.normal(0, 1, 200) + 2 * inc
    d = run.audit_dir("one")
    save_audit_result(audit_from_one_run(scores, inc, claim=claim, delta=1e-5), d)
    atomic_save_npz(d / "scores.npz", scores=scores, included=inc)
    pages = {p.stem: p.read_text() for p in render_reports(run).audits}
    for stem in ("audit-multi", "audit-fresh", "audit-one"):
        assert (
            f'<img src="{stem}-ceiling.png"' in pages[stem]
            and (run.reports_dir() / f"{stem}-ceiling.png").stat().st_size > 1000
        )
        assert "ceiling (largest ε_LB this design can show)" in pages[stem]
    assert "not recorded: this result was stored before ceilings were reported" in pages["audit-multi"]
    assert "not recorded" not in pages["audit-fresh"]
    assert "number of canaries" in pages["audit-one"]
    # Issue 29, defect 4: every report names what its bound assumed.
    assert "assumption of the bound: none (Clopper-Pearson)" in pages["audit-fresh"]
    assert "assumption of the bound: none (Steinke et al. one-run)" in pages["audit-one"]


def test_ceiling_figure_lines_are_told_apart_and_the_legend_is_outside():
    from dpaudit.results.audit import AuditResult, EpsilonByTrials
    from reports.audit import ceiling_figure

    result = AuditResult(
        epsilon_lb=0.5,
        ceiling=3.0,
        confidence=0.95,
        method="multi-run",
        bound="gdp",
        delta=1e-5,
        threshold_strategy="bonferroni",
        num_in=100,
        num_out=100,
        epsilon_ub=1.0,
        accountant="pld",
    )
    curve = EpsilonByTrials(
        unit="trials",
        num_observations=(10, 50, 200),
        num_in=(5, 25, 100),
        num_out=(5, 25, 100),
        epsilon_lb=(0.0, 0.2, 0.5),
        ceiling=(0.5, 2.0, 3.0),
    )
    # Issue 34: the ceiling has a panel of its own (below), so it never squashes ε_LB against ε_UB.
    ax, below = ceiling_figure(curve, result).axes
    lines = {line.get_label().split(" ")[0]: line for a in (ax, below) for line in a.get_lines()}
    lb, ceiling, ub = lines["ε_LB"], lines["ceiling"], lines["ε_UB"]
    assert len({lb.get_color(), ceiling.get_color(), ub.get_color()}) == 3
    assert lb.get_marker() != ceiling.get_marker() and lb.get_linestyle() != ceiling.get_linestyle()
    assert list(ceiling.get_ydata()) == [0.5, 2.0, 3.0] and ax.get_xscale() == "log"
    legend = ax.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1 - 1e-6
    with pytest.raises(ValueError, match="ceiling must be >= epsilon_lb"):
        EpsilonByTrials(
            unit="trials", num_observations=(10,), num_in=(5,), num_out=(5,), epsilon_lb=(1.0,), ceiling=(0.5,)
        )


def test_certified_comparison_keeps_models_of_one_method_distinguishable() -> None:
    # Three smoothing models (σ 0.25 / 0.5 / 1) share a method and a colour: each further one
    # gets its own marker and dash pattern, so no two lines on the axes look alike.
    import numpy as np

    from dpaudit.results.certification import CertificationResult
    from reports.certified import CertifiedRun, comparison_figure

    radii = np.array([0.05, 0.1, 0.5])
    runs = []
    for i, sigma in enumerate((0.25, 0.5, 1.0)):
        cert = CertificationResult(
            method="smoothing",
            norm="l2",
            labels=np.zeros(4, dtype=np.int64),
            predictions=np.zeros(4, dtype=np.int64),
            radii=np.array([0.0, 0.2, 0.6, 1.0]) * (i + 1),
            num_draws=10,
            confidence=0.999,
        )
        summary = {
            "defense": "smoothing",
            "mechanism": "smoothing",
            "noise_std": sigma,
            "model_id": f"smoothing-{i}",
            "radii": radii.tolist(),
        }
        runs.append(CertifiedRun(summary=summary, certificates={"smoothing": cert}, attacks={}))
    fig = comparison_figure(runs)
    lines = fig.axes[0].get_lines()
    assert len(lines) == 3
    looks = {(line.get_marker(), str(line.get_linestyle())) for line in lines}
    assert len(looks) == 3
