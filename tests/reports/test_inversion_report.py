"""The model-inversion report: metrics, image grids and the targets compared, from stored results alone."""

from __future__ import annotations

import re

import pytest

from dpaudit.app.runs.report import render_reports
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.results import save_inversion_result
from dpaudit.store import RunDir
from tests.reports.conftest import DP_MODEL, NONPRIVATE_MODEL

NONPRIVATE = NONPRIVATE_MODEL
DP = DP_MODEL


@pytest.fixture
def inversion_run(tmp_path, write_record, make_inversion_result) -> RunDir:
    """Only inversion results (no audit, membership or certify): two targets, two attacks each."""
    run = RunDir(tmp_path / "run").create(command="test")
    metrics = {"test_accuracy": 0.9, "delta": 1e-5}
    write_record(run, "nonprivate", metrics=metrics)
    write_record(
        run, "dpsgd", claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100), metrics=metrics
    )
    for model_id, top1 in ((NONPRIVATE, 0.75), (DP, 0.25)):
        for i, attack in enumerate(("mi-face", "gmi")):
            save_inversion_result(
                make_inversion_result(model_id, attack, top1=top1, seed=i), run.inversion_dir(model_id)
            )
    return run


@pytest.mark.extended
def test_a_run_with_only_inversion_results_renders_and_the_index_links_it(inversion_run):
    index = render_reports(inversion_run)
    assert [p.name for p in index.inversion] == ["inversion.html"]
    assert index.inversion[0] in index.pages
    assert index.audits == () and index.membership == ()
    assert 'href="inversion.html"' in index.index_html.read_text()
    assert "(inversion.md)" in index.index_md.read_text()
    assert "Model inversion" in index.index_html.read_text()


@pytest.mark.extended
def test_the_page_shows_the_metrics_of_every_target_and_attack(inversion_run):
    page = render_reports(inversion_run).inversion[0]
    html, md = page.read_text(), page.with_suffix(".md").read_text()
    for text in (html, md):
        # Attack accuracies 3/4 and 1/4 of the classes as rates with their counts, the KNN distance (1.2345) and PSNR
        # (17.25)
        # to three significant digits, chance 1/10 as a percentage (issue 34).
        for number in ("75.0% (3/4)", "25.0% (1/4)", "1.23", "17.2", "10.0%"):
            assert number in text, number
        assert "TPR @ 1% FPR" in text and "membership AUC" in text and "ε_LB" in text and "ε_UB" in text
        assert NONPRIVATE in text and DP in text
        assert "mi-face: " in text and "gmi: " in text and "membership AUC" in text  # the finding sentences
    # The DP target's claim: ε under every accountant; the non-private target's ε_UB is ∞.
    assert '<td class="t">rdp' in html
    # One symbol for an unbounded ε on every page (issue 34: inversion reports printed "inf").
    assert "∞" in html and ">inf<" not in html and "inf" not in md.replace("inference", "").replace("inform", "")


@pytest.mark.extended
def test_image_grids_and_the_comparison_figure_are_written_and_shown(inversion_run):
    page = render_reports(inversion_run).inversion[0]
    html = page.read_text()
    srcs = re.findall(r'<img src="([^"]+)"', html)
    assert "inversion-compare.png" in srcs
    for model_id in (NONPRIVATE, DP):
        assert f"inversion-{model_id}-grid-0.png" in srcs
    for src in srcs:
        assert (page.parent / src).stat().st_size > 1000
        assert f"]({src})" in page.with_suffix(".md").read_text()


@pytest.mark.extended
def test_one_target_has_no_comparison(tmp_path, make_inversion_result):
    run = RunDir(tmp_path / "run").create(command="test")
    save_inversion_result(
        make_inversion_result("lonely", "mi-face"), run.inversion_dir("lonely")
    )  # no record in the run
    page = render_reports(run).inversion[0]
    html = page.read_text()
    assert "Targets compared" not in html and "compare.png" not in html
    assert "record is not in this run directory" in html
    assert "10.0%" in html  # chance from the stored dataset class count


@pytest.mark.extended
def test_image_grid_layout_many_classes_and_rgb(make_inversion_result):
    from reports.inversion import image_grid

    faces = [make_inversion_result("m", a, k=12, shape=(1, 112, 92), seed=i) for i, a in enumerate(("mi-face", "gmi"))]
    fig = image_grid(faces, list(range(10)))
    # Rows: class mean + 3 per attack; one column per class; each image keeps its aspect ratio.
    assert len(fig.axes) == (1 + 3 * 2) * 10
    img = fig.axes[0].get_images()[0]
    assert img.get_array().shape == (112, 92) and fig.axes[0].get_aspect() == 1.0
    rgb = image_grid([make_inversion_result("m", "mi-face", k=3, shape=(3, 8, 8))])
    assert rgb.axes[0].get_images()[0].get_array().shape == (8, 8, 3)
    assert image_grid([]) is None


def test_comparison_figure_series_are_distinguishable_and_legend_outside(inversion_run):
    from reports.figures import colour
    from reports.inversion import comparison_figure, load_inversion_targets

    targets = load_inversion_targets(inversion_run)
    assert [t.model_id for t in targets] == [DP, NONPRIVATE]  # ordered by claimed ε, ∞ last
    fig = comparison_figure(targets)
    left, right = fig.axes
    lines = {line.get_label(): line for line in right.get_lines()}
    assert lines["mi-face"].get_color() == colour("mi-face") and lines["gmi"].get_color() == colour("gmi")
    assert lines["mi-face"].get_marker() != lines["gmi"].get_marker()
    legend = right.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 >= right.get_window_extent().x1 - 1e-6
    assert comparison_figure([]) is None
