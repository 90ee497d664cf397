"""docs/performance.md's figures and sizing and README.md's headline are what ``python -m bench.report``
renders from the committed results file (bench/published.json), so neither can go stale silently; the
sizing is arithmetic on named bench figures, and a file that is not the bench's gets a clear error."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bench import report


def test_the_checked_in_documents_are_the_generated_ones() -> None:
    data = report.load(report.PUBLISHED)
    for path, text in report.documents(data).items():
        assert path.read_text() == text, (
            f"{path.name} is out of date with bench/published.json: python -m bench.report --write"
        )


def test_the_published_file_carries_the_machine_and_the_figures_the_sizing_needs() -> None:
    data = report.load(report.PUBLISHED)
    assert {"date", "cores", "cpu_model", "redis_version", "python_version"} <= data["machine"].keys()
    sizing = report.Sizing.of(data)
    assert None not in (sizing.redis_us_per_step, sizing.worker_us_per_step, sizing.in_flight)
    assert sizing.kb_per_in_flight_run is not None and sizing.kb_per_finished_run is not None


def figure(name: str, ours: list[float], base: list[float], **extra: float) -> dict[str, Any]:
    ratio = (sorted(ours)[len(ours) // 2] / sorted(base)[len(base) // 2]) if ours and base else None
    return {
        "figure": name,
        "unit": "",
        "ours": {"samples": ours},
        "baseline": {"name": "base", "samples": base},
        "ratio": ratio,
        "target": "",
        "note": "",
        "extra": extra,
    }


MACHINE = {
    "date": "2030-01-02",
    "cores": 8,
    "cpu_model": "X",
    "redis_version": "7.2.4",
    "python_version": "3.12.1",
    "load_start": 0.5,
    "load_end": 0.7,
}
DATA: dict[str, Any] = {
    "machine": MACHINE,
    "args": {"only": ["throughput", "functions", "concurrency"], "reps": 2, "runs": 1000},
    "figures": [
        figure("1. one-step runs/s", [2000.0], [2500.0], redis_kb_per_finished_run=12.5),
        figure("3b. Redis CPU per step", [100.0, 120.0, 110.0], [150.0]),
        figure("3f. worker CPU per step", [400.0], [600.0]),
        figure("4. 100 runs in flight", [95.0], [100.0], in_flight=100, worker_kb_per_run=80.0),
        figure("4. 1000 runs in flight", [800.0], [1000.0], in_flight=1000, worker_kb_per_run=40.0),
        figure("4. 2000 runs in flight", [1000.0], [2000.0], in_flight=2000, worker_kb_per_run=35.0),
    ],
}


def test_the_sizing_takes_each_number_from_its_figure() -> None:
    s = report.Sizing.of(DATA)
    assert s.redis_us_per_step == 110.0  # 3b's median
    assert (s.worker_us_per_step, s.worker_us_per_pure_step) == (600.0, 400.0)  # 3f: undeclared, declared
    # 2,000 in flight kept 0.5 of ideal: the largest that kept 0.75 is 1,000, and its memory a run
    assert (s.in_flight, s.of_ideal, s.kb_per_in_flight_run) == (1000, 0.8, 40.0)
    assert s.kb_per_finished_run == 12.5
    text = report.render_figures(DATA)
    assert "Measured on 2030-01-02: 8 cores (X), Redis 7.2.4, Python 3.12.1" in text
    assert "Run: `bin/dev bench --only throughput functions concurrency --reps 2`." in text
    assert "0.11 Redis cores: 1 master planned at half a core each" in text
    # 10,000 runs, a step each 5 s: 2,000 steps/s × 110 µs = 0.22 cores; 10 processes of 1,000 runs
    assert (
        "0.22 Redis cores (1 master), 1.20 worker cores, and at 1,000 runs a process 10 worker processes"
        in text
    )


def test_a_figure_not_in_the_file_is_named_with_the_command_that_measures_it() -> None:
    data = copy.deepcopy(DATA)
    data["figures"] = [f for f in data["figures"] if not f["figure"].startswith("4.")]
    text = report.render_figures(data)
    assert "not in this results file (`bin/dev bench --only concurrency` measures it)" in text
    assert "For example" not in text


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "not a readable JSON file"),
        (json.dumps({"rows": []}), "no 'figures' list"),
        (json.dumps({"figures": []}), "no 'machine'"),
    ],
)
def test_a_file_that_is_not_the_bench_json_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    bad = tmp_path / "results.json"
    bad.write_text(content)
    assert report.main(["--from", str(bad)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_document_without_its_markers_is_refused() -> None:
    with pytest.raises(report.ReportError, match="no '<!-- figures"):
        report.replace_part("# Performance\n", report.FIGURES, "x", "docs/performance.md")


def test_a_note_several_rows_share_is_listed_once_and_different_notes_each() -> None:
    data = copy.deepcopy(DATA)
    for n in (100, 1000, 2000):
        row = figure(f"4b. Redis commands/s of one worker, {n} runs waiting", [68.0], [68.0])
        data["figures"].append({**row, "note": "2.0 beats/s"})
    data["figures"][0]["note"] = "13.7 KB a run"
    data["figures"][3]["note"] = "81 KB a run"
    data["figures"][4]["note"] = "52 KB a run"
    lines = report.figures_table(data)
    notes = lines[lines.index("What the bench noted beside each figure:") + 2 :]
    assert notes == [
        "- **1. one-step runs/s**: 13.7 KB a run",
        "- **4. 100 runs in flight**: 81 KB a run",
        "- **4. 1000 runs in flight**: 52 KB a run",
        "- **4b. Redis commands/s of one worker**: 2.0 beats/s",
    ]
