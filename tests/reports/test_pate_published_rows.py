"""The PATE page's published numbers: given as PublishedRow values or as a script's mappings, read once with named
errors; the measured rows are PateRow values (reports/pate.py)."""

from __future__ import annotations

import pytest

from reports.pate import PateRow, PublishedRow, accuracy_epsilon_figure, accuracy_epsilon_sentence, pate_sections
from reports.render import Figure, Table

PAPER = {"label": "Papernot et al. 2018, MNIST", "epsilon": 1.97, "accuracy": 0.985, "answered": 286, "source": "§5"}


def _row(label: str, epsilon: float, accuracy: float | None) -> PateRow:
    return PateRow(
        label=label,
        model_id=label,
        teachers=10,
        queries=20,
        answered=20,
        answer_accuracy=0.9,
        epsilon=epsilon,
        epsilon_data_dependent_realised=None,
        epsilon_data_dependent_realised_improved=None,
        epsilon_data_independent=epsilon,
        epsilon_noisy_estimate=None,
        data_dependent=False,
        sanitised=False,
        delta=1e-5,
        student_accuracy=accuracy,
        teacher_accuracy_mean=None,
    )


def _published_table(sections) -> Table:
    return next(b for s in sections for b in s.blocks if isinstance(b, Table) and b.columns[0] == "published row")


def test_a_published_mapping_is_the_row_it_names() -> None:
    by_mapping = _published_table(pate_sections([], published=[PAPER]))
    by_value = _published_table(pate_sections([], published=[PublishedRow(**PAPER)]))
    assert by_mapping.rows == by_value.rows == [["Papernot et al. 2018, MNIST", 286, 1.97, 0.985, "§5"]]
    # Optional fields: answered shows a dash, source is empty.
    short = _published_table(pate_sections([], published=[{"label": "x", "epsilon": 2.0, "accuracy": 0.9}]))
    assert short.rows == [["x", "—", 2.0, 0.9, ""]]


@pytest.mark.parametrize(
    ("row", "error", "message"),
    [
        ({**PAPER, "acuracy": 0.9}, ValueError, "unknown \\['acuracy'\\]"),
        ({"label": "x", "epsilon": 1.0}, ValueError, "missing 'accuracy'"),
        ({**PAPER, "epsilon": "1.97"}, TypeError, "epsilon and accuracy must be numbers"),
        ({**PAPER, "answered": 2.5}, TypeError, "answered must be an integer"),
        ({**PAPER, "label": 7}, TypeError, "label and source must be text"),
    ],
)
def test_a_bad_published_row_is_refused_by_name(row, error, message) -> None:
    with pytest.raises(error, match=message) as info:
        pate_sections([], published=[row])
    assert getattr(info.value, "argument", None) == "published"


def test_the_accuracy_plot_counts_only_the_points_it_can_draw() -> None:
    measured = [_row("a", 1.0, 0.9), _row("b", 2.0, None)]
    # One drawable point (b has no accuracy): a sentence, not a plot; with a published row, two points.
    assert accuracy_epsilon_figure(measured) is None
    assert "one student only — a: ε" in accuracy_epsilon_sentence(measured[:1])
    fig = accuracy_epsilon_figure(measured, published=[PublishedRow(**PAPER)])
    assert fig is not None
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["measured: a", f"published: {PAPER['label']}"]
    assert [line.get_markerfacecolor() == "none" for line in lines] == [False, True]
    figures = [b for s in pate_sections([], published=[PAPER]) for b in s.blocks if isinstance(b, Figure)]
    assert all(f.figure is None for f in figures)  # no student, one published point: nothing is drawn
