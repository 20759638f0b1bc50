"""What a report hands a paper (issue 34, item 4): every figure as PNG, SVG, PDF and its data as
CSV, every table as CSV and LaTeX, linked from the page; ``dpaudit report --format md|html|latex``.

pdflatex is not assumed: a LaTeX page is checked to be well-formed (ASCII only, balanced braces and
environments, no stray special character, every ``\\input`` and ``\\includegraphics`` target
beside it); where pdflatex is installed, an extended test also compiles every kind's pages
(twice, as longtable and labels need) and fails on a table wider than the text. Issue 46: PDFs
embed TrueType fonts, ``--format md`` links no page it did not write, tables are never shrunk.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from dpaudit.app.cli import build_parser, main
from dpaudit.app.runs.report import render_reports
from reports.exports import DATA_COLUMNS, figure_data, latex_table, latex_text, save_figure
from reports.kinds import REPORT_KINDS
from reports.render import REPORT_FORMATS, Link, Section, Table, report_format, write_report_files

KINDS = sorted(REPORT_KINDS)


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


# -- the data behind a figure -------------------------------------------------------------------


def _every_artist() -> Figure:
    fig = Figure()
    ax, bx = fig.subplots(1, 2)
    ax.plot([1, 2, 3], [0.5, 0.25, 0.125], label="rmia")
    ax.axhline(0.75, label="chance")
    ax.scatter([4.0], [0.5], label="published")
    ax.errorbar([1.0, 2.0], [0.3, 0.4], yerr=[0.1, 0.2], label="dpsgd", capsize=3)
    ax.fill_between([0.0, 1.0], [0.0, 0.0], [1.0, 1.0], label="band")
    ax.set_title("left")
    ax.set_xlabel("ε")
    bx.bar([0, 1], [0.9, 0.6], label="accuracy")
    bx.set_xticks([0, 1], ["nonprivate", "dpsgd"])
    bx.hist([0.0, 0.0, 1.0], bins=[0.0, 0.5, 1.0], histtype="stepfilled", label="scores")
    return fig


def test_figure_data_reads_lines_bars_scatter_errorbars_areas_and_histograms():
    rows = [dict(zip(DATA_COLUMNS, r, strict=True)) for r in figure_data(_every_artist())]
    by = lambda series, kind: [r for r in rows if r["series"] == series and r["type"] == kind]
    assert [(r["x"], r["y"]) for r in by("rmia", "line")] == [("1", "0.5"), ("2", "0.25"), ("3", "0.125")]
    assert (
        {r["panel"] for r in by("rmia", "line")} == {"1"}
        and by("rmia", "line")[0]["panel_title"] == "left"
        and by("rmia", "line")[0]["x_label"] == "ε"
    )
    # axhline spans the axes: its x is a fraction of the axes, so it is left out, its y kept.
    assert [(r["x"], r["y"]) for r in by("chance", "line")] == [("", "0.75"), ("", "0.75")]
    assert [(r["x"], r["y"]) for r in by("published", "scatter")] == [("4.0", "0.5")]
    assert [(r["x"], r["y"]) for r in by("dpsgd", "line")] == [("1.0", "0.3"), ("2.0", "0.4")]
    bars = by("dpsgd", "errorbar")
    assert [float(v) for r in bars for v in (r["x"], r["y"], r["x_end"], r["y_end"])] == pytest.approx(
        [1.0, 0.2, 1.0, 0.4, 2.0, 0.2, 2.0, 0.6]
    )
    assert not [r for r in rows if r["series"].startswith("line ")], "cap markers are not series"
    assert len(by("band", "area")) >= 4
    assert [(r["category"], r["y"]) for r in by("accuracy", "bar")] == [("nonprivate", "0.9"), ("dpsgd", "0.6")]
    heights = {float(r["y"]) for r in by("scores", "area")}
    assert heights == {0.0, 2.0, 1.0}  # the two bins' counts
    assert {r["panel"] for r in by("accuracy", "bar")} == {"2"}


@pytest.mark.extended
def test_a_figure_is_written_as_png_svg_pdf_and_csv_byte_identical_twice(tmp_path):
    fig = _every_artist()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = save_figure(fig, tmp_path / "a", "f"), save_figure(fig, tmp_path / "b", "f")
    assert sorted(first) == ["csv", "pdf", "png", "svg"]
    for fmt, path in first.items():
        assert path.read_bytes() == second[fmt].read_bytes(), f"the {fmt} differs from one rendering to the next"
    assert first["pdf"].read_bytes().startswith(b"%PDF") and b"CreationDate" not in first["pdf"].read_bytes()
    assert b"<svg" in first["svg"].read_bytes() and b"<dc:date>" not in first["svg"].read_bytes()
    assert list(_rows(first["csv"])[0]) == list(DATA_COLUMNS)
    assert b"/FontFile2" in first["pdf"].read_bytes()  # Type 42 embeds the TrueType font


def test_an_image_only_figure_has_no_data_csv(tmp_path):
    fig = Figure()
    fig.add_subplot(1, 1, 1).imshow(np.zeros((4, 4)))
    assert figure_data(fig) == [] and sorted(save_figure(fig, tmp_path, "grid")) == ["pdf", "png", "svg"]


# -- tables --------------------------------------------------------------------------------------


def test_latex_text_escapes_specials_and_writes_symbols_as_math():
    assert latex_text("ε_LB ≥ 50% & δ=1e-05 #1 {x} ~ ^ \\ ∞ — ü 中 ε model_id") == (
        r"$\varepsilon_{\mathrm{LB}}$ $\geq$ 50\% \& $\delta$=1e-05 \#1 \{x\} "
        r"\textasciitilde{} \textasciicircum{} \textbackslash{} $\infty$ --- u ? "
        r"$\varepsilon$ model\_id"
    )


def test_subscripts_and_superscripts_are_typeset_as_such_and_symbols_never_open_display_math():
    # σ₁ was "$\sigma$1": a σ followed by a one, not σ with subscript 1.
    assert latex_text("σ₁ = 0.5, σ₁₂") == r"$\sigma_{1}$ = 0.5, $\sigma_{12}$"
    assert latex_text("ε_LB and ε_UB") == r"$\varepsilon_{\mathrm{LB}}$ and $\varepsilon_{\mathrm{UB}}$"
    assert latex_text("δ = 10⁻⁵, x₀, n²") == r"$\delta$ = 10$^{-5}$, x$_{0}$, n$^{2}$"
    # Two symbols side by side are one formula: "$$" would open display math.
    assert latex_text("ε≤∞") == r"$\varepsilon\leq\infty$" and "$$" not in latex_text("σ₁≥ε_LB")
    assert latex_text(r"\$σ") == r"\textbackslash{}\$$\sigma$"  # an escaped dollar is text, not math


def _tex_table(columns, rows, **kw) -> str:
    return latex_table(columns, rows, lambda x: "—" if x is None else str(x), **kw)


def test_a_latex_table_is_never_shrunk_and_a_wide_one_is_split_by_columns_each_part_labelled():
    from reports.exports import CHAR_PT, COLSEP_PT, TEXT_WIDTH_PT

    narrow = _tex_table(["setting", "ε_UB"], [["dpsgd", 1.0]], caption="A table.", label="tab:p-t")
    assert narrow.count(r"\begin{longtable}") == 1 and r"\small" in narrow and r"\label{tab:p-t}" in narrow
    assert r"\caption{A table.}" in narrow and r"\resizebox" not in narrow and r"\scalebox" not in narrow
    # Twelve columns of 12-character numbers: about 12 × (12 × 5 + 12) = 864 pt against 500 pt of text.
    columns = ["setting", *(f"measure {i}" for i in range(11))]
    values = [f"{i}.{i:09d}" for i in range(11)]  # 11 or 12 characters, none inside another
    wide = _tex_table(columns, [["dpsgd", *values]], label="tab:p-w")
    parts = re.findall(r"\\begin\{longtable\}\{([^}]*)\}(.*?)\\end\{longtable\}", wide, re.S)
    assert len(parts) >= 2 and r"\resizebox" not in wide
    for p, (spec, body) in enumerate(parts, start=1):
        assert body.count("dpsgd") == 1  # every part repeats the key column
        assert (r"\label{tab:p-w}" if p == 1 else rf"\label{{tab:p-w-{p}}}") in body
        assert len(spec) * (12 * CHAR_PT + COLSEP_PT) <= TEXT_WIDTH_PT + 12 * CHAR_PT + COLSEP_PT
    # Every measure is in exactly one part.
    assert sorted(c for c in columns[1:] if wide.count(c) >= 1) == sorted(columns[1:])
    assert all(sum(body.count(v) for _, body in parts) == 1 for v in values)


def test_a_table_is_written_as_csv_at_full_precision_and_latex_as_the_page_prints_it(tmp_path):
    table = Table(
        columns=["setting", "ε_UB", "AUC"],
        rows=[[Link(text="dpsgd", href="x.html"), float("inf"), 0.51234567], ["nonprivate", None, True]],
        caption="c",
    )
    written = write_report_files(
        tmp_path,
        [Section(title="s", blocks=[table, Table(columns=["a"], rows=[[1]], name="second")])],
        title="t",
        stem="p",
    )
    html = written.html.read_text()
    assert 'href="p-table-1.csv">CSV</a> · <a href="p-table-1.tex">LaTeX</a>' in html and 'href="p-second.tex"' in html
    assert "[CSV](p-table-1.csv) · [LaTeX](p-table-1.tex)" in written.markdown.read_text()
    assert _rows(tmp_path / "p-table-1.csv") == [
        {"setting": "dpsgd", "ε_UB": "inf", "AUC": "0.51234567"},
        {"setting": "nonprivate", "ε_UB": "", "AUC": "yes"},
    ]
    tex = (tmp_path / "p-table-1.tex").read_text()
    assert (
        r"\begin{longtable}{lrr}" in tex
        and r"\toprule" in tex
        and r"setting & $\varepsilon_{\mathrm{UB}}$ & AUC \\" in tex
        and r"\caption{c}\label{tab:p-table-1}" in tex
    )
    assert (
        r"dpsgd & $\infty$ & 0.512 \\" in tex
        and ">∞</td>" in html
        and r"nonprivate & — & yes \\".replace("—", "---") in tex
    )
    assert {p.name for p in written.exports} == {"p-table-1.csv", "p-table-1.tex", "p-second.csv", "p-second.tex"}
    with pytest.raises(ValueError, match="name"):
        Table(columns=["a"], rows=[], name="a b")


def test_a_column_of_words_has_a_flush_left_heading(tmp_path):
    table = Table(columns=["ε", "how", "mixed"], rows=[[0.5, "multi-run", "n/a"], [0.25, None, 0.1]])
    html = write_report_files(tmp_path, [Section(title="s", blocks=[table])], title="t", stem="p").html.read_text()
    assert '<th>ε</th><th class="t" style="text-align:left">how</th><th>mixed</th>' in html


# -- every kind's pages link every export ----------------------------------------------------------


@pytest.mark.extended
@pytest.mark.parametrize("name", KINDS)
def test_every_figure_and_table_of_every_kind_has_its_exports(name, rendered_samples):
    if rendered_samples[name] is None:
        pytest.fail(
            f"report kind {name!r} has no sample run: add a builder to REPORT_SAMPLES in tests/reports/conftest.py"
        )
    _, index = rendered_samples[name]
    for page in index.pages_of(name):
        html = page.read_text(encoding="utf-8")
        for src in re.findall(r'<img src="([^"]+)"', html):
            stem = src.removesuffix(".png")
            for suffix in (".svg", ".pdf"):
                assert f'href="{stem}{suffix}"' in html and (page.parent / f"{stem}{suffix}").stat().st_size > 500
        for data in re.findall(r'<a href="([^"]+)">data \(CSV\)</a>', html):
            rows = _rows(page.parent / data)
            assert rows and list(rows[0]) == list(DATA_COLUMNS), data
        tables = re.findall(
            r"<table>.*?<thead><tr>(.*?)</tr></thead>.*?</table>\s*<p "
            r"class=\"downloads\"[^>]*><a href=\"([^\"]+)\">CSV</a> · <a "
            r"href=\"([^\"]+)\">LaTeX</a>",
            html,
            re.S,
        )
        assert len(tables) == html.count("<table>"), f"{page.name}: a table without its CSV and LaTeX links"
        for head, csv_name, tex_name in tables:
            columns = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<th[^>]*>(.*?)</th>", head)]
            with (page.parent / csv_name).open(encoding="utf-8") as f:
                assert next(csv.reader(f)) == [
                    c.replace("&#39;", "'").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">")
                    for c in columns
                ]
            assert_well_formed_latex(page.parent / tex_name)


# -- --format ---------------------------------------------------------------------------------------


_BEGIN_END = re.compile(r"\\(begin|end)\{([^}]*)\}")
_TARGET = re.compile(r"\\(input|includegraphics)(?:\[[^\]]*\])?\{(\{[^}]*\}[^}]*|[^}]*)\}")


def assert_well_formed_latex(path: Path) -> None:
    """What pdflatex needs of a file we write, short of running it; recurses into every ``\\input``."""
    text = path.read_text(encoding="utf-8")
    assert text.isascii(), (
        f"{path.name}: non-ASCII {sorted({c for c in text if not c.isascii()})} (pdflatex without inputenc set-up)"
    )
    body = re.sub(r"\\[\\{}&%$#_]", "", text)  # escaped specials are plain characters
    depth = 0
    for ch in body:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0, f"{path.name}: a closing brace without its opening one"
    assert depth == 0, f"{path.name}: {depth} unclosed brace(s)"
    assert "%" not in body and "#" not in body, f"{path.name}: an unescaped % or #"
    for line, raw in zip(body.splitlines(), text.splitlines(), strict=True):
        assert line.count("$") % 2 == 0, f"{path.name}: unbalanced $ in {raw!r}"
        assert "_" not in re.sub(r"\$[^$]*\$", "", line), f"{path.name}: an unescaped _ outside math in {raw!r}"
        if "&" in line:
            assert raw.rstrip().endswith("\\\\"), f"{path.name}: & outside a table row in {raw!r}"
    stack: list[str] = []
    for verb, env in _BEGIN_END.findall(text):
        if verb == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env, f"{path.name}: \\end{{{env}}} does not close the open environment"
    assert not stack, f"{path.name}: unclosed environments {stack}"
    for command, target in _TARGET.findall(text):
        name = target.replace("{", "").replace("}", "")
        file = path.parent / (name if Path(name).suffix in (".tex", ".pdf") else f"{name}.tex")
        assert file.is_file(), f"{path.name}: \\{command} of {name}, which is not there"
        if file.suffix == ".tex":
            assert_well_formed_latex(file)


@pytest.mark.extended
def test_format_latex_writes_a_standalone_tex_per_page_and_an_index_inputting_them(report_samples, tmp_path, capsys):
    run = report_samples["audits"](tmp_path / "run")
    code = main(["report", str(run.path), "--format", "latex", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["format"] == "latex" and payload["index"].endswith("index.tex")
    pages = [Path(p) for p in payload["audits"]]
    assert [p.name for p in pages] == ["audit-multi.tex"]
    out = run.reports_dir()
    assert not list(out.glob("*.html")) and not list(out.glob("*.md"))
    for page in (*pages, out / "index.tex"):
        text = page.read_text()
        assert text.startswith("\\documentclass") and "\\input{audit-multi-body}" in text
        assert_well_formed_latex(page)
    body = (out / "audit-multi-body.tex").read_text()
    assert (
        "\\includegraphics" in body and "{{audit-multi-roc}.pdf}" in body and "\\input{audit-multi-table-1.tex}" in body
    )
    assert "No violation" in body  # the verdict's words are on the LaTeX page too
    assert b"/FontFile2" in (out / "audit-multi-roc.pdf").read_bytes()  # paper PDFs embed TrueType


def test_format_md_writes_only_markdown_and_html_stays_the_default(report_samples, tmp_path, capsys):
    run = report_samples["pate"](tmp_path / "run")
    code = main(["report", str(run.path), "--format", "md", "--json"])
    payload = json.loads(capsys.readouterr().out)
    out = run.reports_dir()
    page = out / "pate.html"  # the page's identity; under --format md only its Markdown twin is written
    assert code == 0 and payload["pate"] == [str(page.with_suffix(".md"))] and payload["index"] == str(out / "index.md")
    assert not list(out.glob("*.html")) and {p.name for p in out.glob("*.tex")} == {
        "pate-table-1.tex"
    }  # a table's LaTeX, no page
    assert (
        "[SVG](pate-pate-epsilon-answered.svg) · "
        "[PDF](pate-pate-epsilon-answered.pdf) · [data "
        "(CSV)](pate-pate-epsilon-answered.csv)" in page.with_suffix(".md").read_text()
    )
    # The default stays what it was before --format existed: HTML with its Markdown twin (the contract suite renders
    # it).
    assert build_parser(["report"]).parse_args(["report", str(run.path)]).format == "html"


def test_an_unknown_format_is_a_usage_error_naming_format(report_samples, tmp_path, capsys):
    run = report_samples["pate"](tmp_path / "run")
    code = main(["report", str(run.path), "--format", "pdf"])
    err = capsys.readouterr().err
    assert code == 2 and "--format" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="format"):
        render_reports(run, format="pdf")
    with pytest.raises(ValueError, match="format"), report_format("docx"):
        pass


def test_the_cli_offers_the_writers_formats():
    from dpaudit.app.verbs import report

    assert report.REPORT_FORMATS == REPORT_FORMATS


# -- PDFs, Markdown links, LaTeX that compiles -------------------------------------------------------------------


def test_every_pdf_embeds_truetype_fonts_never_type3(tmp_path):
    # The figure style itself (rcParams set by reports.figures), not only the report writer's save: a figure
    # saved by hand from a plotting function is TrueType too.
    import reports.figures  # noqa: F401  (sets the style)

    fig = Figure(figsize=(3, 2))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], label="ε_LB")
    ax.set_xlabel("radius")
    ax.legend()
    fig.savefig(tmp_path / "by-hand.pdf")
    written = save_figure(fig, tmp_path, "written")["pdf"]
    for pdf in (tmp_path / "by-hand.pdf", written):
        data = pdf.read_bytes()
        assert b"/Type3" not in data, f"{pdf.name} embeds a Type 3 font"
        assert b"/FontFile2" in data, f"{pdf.name} embeds no TrueType font"


_MD_LINK = re.compile(r"(?<!\\)\]\(([^)\s]+)\)")


def _dead_md_links(reports_dir: Path) -> list[str]:
    pages = sorted(reports_dir.glob("*.md"))
    assert pages, f"no Markdown page in {reports_dir}"
    return [
        f"{page.name} links {target}, which was not written"
        for page in pages
        for target in _MD_LINK.findall(page.read_text(encoding="utf-8"))
        if not (page.parent / target).is_file()
    ]


@pytest.mark.extended
def test_format_md_links_only_files_it_wrote(report_samples, tmp_path):
    run = report_samples["pate"](tmp_path / "run")
    render_reports(run, format="md")
    out = run.reports_dir()
    index = (out / "index.md").read_text(encoding="utf-8")
    page = "pate"  # the report kind's page, linked by its Markdown file
    assert f"({page}.md)" in index and ".html" not in index
    assert not _dead_md_links(out)
    # Under the default format both are written, and the index links both.
    render_reports(run)
    assert "(pate.html)" in (out / "index.md").read_text(encoding="utf-8") and not _dead_md_links(out)


@pytest.mark.extended
@pytest.mark.parametrize("name", KINDS)
def test_format_md_has_no_dead_link_in_any_kind(name, report_samples, tmp_path):
    run = report_samples[name](tmp_path / "run")
    render_reports(run, format="md")
    assert not list(run.reports_dir().glob("*.html"))
    assert not _dead_md_links(run.reports_dir())


# Commands that would set a table below 9 pt (the pages set tables in \small, 9 pt of a 10 pt document).
_SHRINKING = re.compile(r"\\(resizebox|scalebox|tiny|scriptsize|footnotesize)\b")


def _pdflatex(page: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", page.name],
        cwd=page.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.extended
@pytest.mark.parametrize("name", KINDS)
def test_every_kind_compiles_with_pdflatex_and_no_table_is_shrunk(name, report_samples, tmp_path):
    if name not in report_samples:
        pytest.fail(f"report kind {name!r} has no sample run")
    run = report_samples[name](tmp_path / "run")
    index = render_reports(run, format="latex")
    for tex in run.reports_dir().glob("*.tex"):
        text = tex.read_text(encoding="utf-8")
        assert not _SHRINKING.search(text), f"{tex.name} shrinks a table or its font: {_SHRINKING.search(text)[0]}"
    pages = [*index.pages_of(name), index.index]
    for page in pages:
        assert page is not None
        assert_well_formed_latex(page)
        body = page.with_name(page.stem + "-body.tex")
        if body.is_file():  # every figure and table of the page is labelled
            text = body.read_text(encoding="utf-8")
            assert text.count(r"\begin{figure}") == text.count(r"\label{fig:")
            for table in re.findall(r"\\input\{([^}]+\.tex)\}", text):
                assert r"\label{tab:" in (page.parent / table).read_text(encoding="utf-8"), table
    if shutil.which("pdflatex") is None:
        pytest.skip(
            "pdflatex is not installed (Debian: apt-get install texlive-latex-base texlive-latex-recommended; "
            ".ci/run installs it where apt-get can)"
        )
    for page in pages:
        assert page is not None
        _pdflatex(page)  # longtable settles its column widths on the second pass, as the labels do
        done = _pdflatex(page)
        assert done.returncode == 0, done.stdout[-3000:]
        log = page.with_suffix(".log").read_text(encoding="utf-8", errors="replace")
        # A table wider than the text would be an overfull alignment: the split must have prevented it.
        wide = re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\) in alignment", log)
        assert not [w for w in wide if float(w) > 1.0], f"{page.name}: tables wider than the text by {wide} pt"
