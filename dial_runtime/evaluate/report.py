"""The evaluation's report: scores summed up per side (the recorded agent and each candidate), each naming the
points behind it; a readable form (a table per conversation, the worst points first, each with its excerpt of
the log); JSON; a chart of each side per score; and the difference between two candidates (A/B)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import msgspec

from .counterfactual import LOWER_IS_BETTER, SCORES, ConversationScore, Point

__all__ = ["Comparison", "EvalReport", "Summary", "bar_chart", "markdown", "write_chart"]

#: How many of a conversation's worst points the readable report shows with their excerpts.
WORST_SHOWN = 3


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """One score of one side: its mean over the points where it applies, and those points
    (``conversation#number``)."""

    mean: float | None
    points: tuple[str, ...] = ()


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """Candidate ``a`` against candidate ``b`` on one score: the difference of their means (``a`` minus ``b``)
    over the points where both apply, how many points that rests on, and how many of them differ."""

    score: str
    difference: float | None
    points: int
    differing: int


class EvalReport(msgspec.Struct, frozen=True, kw_only=True):
    """What an evaluation came to: each conversation's points, the summary by side and score, and the A/B
    comparison when two candidates were scored."""

    conversations: tuple[ConversationScore, ...]
    sides: tuple[str, ...]
    summary: dict[str, dict[str, Summary]]
    comparison: tuple[Comparison, ...] = ()

    @classmethod
    def of(cls, conversations: Sequence[ConversationScore], candidates: Sequence[str]) -> EvalReport:
        """The report of scored conversations."""
        sides = ("recorded", *candidates)
        points = [point for conversation in conversations for point in conversation.points]
        summary = {side: {name: _summary(points, side, name) for name in SCORES} for side in sides}
        comparison: tuple[Comparison, ...] = ()
        if len(candidates) == 2:
            comparison = tuple(_compare(points, candidates[0], candidates[1], name) for name in SCORES)
        return cls(conversations=tuple(conversations), sides=sides, summary=summary, comparison=comparison)

    def to_json(self) -> bytes:
        """The report as JSON."""
        return msgspec.json.format(msgspec.json.encode(self), indent=2)

    def __str__(self) -> str:
        lines = [_summary_table(self)]
        if self.comparison:
            a, b = self.sides[1], self.sides[2]
            lines += ["", f"A/B: {a} minus {b}"]
            for compared in self.comparison:
                shown = "n/a" if compared.difference is None else f"{compared.difference:+.3f}"
                rests = f"over {compared.points} point(s), {compared.differing} differ"
                lines.append(f"  {compared.score:<18} {shown:>7}  {rests}")
        for conversation in self.conversations:
            lines += ["", _conversation_text(conversation, self.sides)]
        return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _summary(points: Sequence[Point], side: str, name: str) -> Summary:
    behind = [(point, point.scores.get(side, {}).get(name)) for point in points]
    applied = [(point, value) for point, value in behind if value is not None]
    mean = sum(value for _, value in applied) / len(applied) if applied else None
    return Summary(mean=mean, points=tuple(f"{p.conversation}#{p.number}" for p, _ in applied))


def _compare(points: Sequence[Point], a: str, b: str, name: str) -> Comparison:
    pairs = [
        (first, second)
        for point in points
        if (first := point.scores.get(a, {}).get(name)) is not None
        and (second := point.scores.get(b, {}).get(name)) is not None
    ]
    difference = sum(x - y for x, y in pairs) / len(pairs) if pairs else None
    return Comparison(
        score=name, difference=difference, points=len(pairs), differing=sum(x != y for x, y in pairs)
    )


def _summary_table(report: EvalReport) -> str:
    """Each side's mean per score (``n/a`` where it applied at no point), and at how many points it applied."""
    width = max(12, *(len(side) for side in report.sides))
    marked = {name: f"{name} (lower best)" if name in LOWER_IS_BETTER else name for name in SCORES}
    first = max(len("score"), *(len(text) for text in marked.values()))
    head = f"{'score':<{first}} " + " ".join(f"{side:>{width}}" for side in report.sides) + "  points"
    rows = [head, "-" * len(head)]
    for name in SCORES:
        cells = " ".join(f"{_cell(report.summary[side][name].mean):>{width}}" for side in report.sides)
        counts = "/".join(str(len(report.summary[side][name].points)) for side in report.sides)
        rows.append(f"{marked[name]:<{first}} {cells}  {counts}")
    return "\n".join(rows)


def _badness(point: Point, side: str) -> float:
    """How badly ``side`` did at ``point``: the mean shortfall over the scores that apply (0 is perfect)."""
    values = [
        value if name in LOWER_IS_BETTER else 1.0 - value
        for name, value in point.scores.get(side, {}).items()
        if value is not None
    ]
    return sum(values) / len(values) if values else 0.0


def _conversation_text(conversation: ConversationScore, sides: Sequence[str]) -> str:
    candidates = [side for side in sides if side != "recorded"]
    lines = [f"conversation {conversation.conversation}: {len(conversation.points)} point(s)"]
    head = "  point  turn  " + "  ".join(f"{side[:12]:>12}" for side in sides)
    lines += [head]
    for point in conversation.points:
        cells = "  ".join(f"{1.0 - _badness(point, side):>12.2f}" for side in sides)
        lines.append(f"  {point.number:>5}  {point.turn:>4}  {cells}")
    ends = ", ".join(f"{side} {conversation.turns_to_end.get(side)}" for side in sides)
    lines.append(f"  points to the person's end ({len(conversation.ends)} payload(s) run): {ends}")
    for side in candidates:
        worst = sorted(conversation.points, key=lambda point: -_badness(point, side))[:WORST_SHOWN]
        for point in (p for p in worst if _badness(p, side) > 0):
            reply = point.candidates.get(side)
            lines.append(f"  worst for {side}: point {point.number} (seq {point.seq}), " + _failing(point, side))
            lines += [f"    recorded {line}" for line in point.recorded.excerpt]
            if reply is not None and reply.error is not None:
                lines.append(f"    {side}: no reply ({reply.error})")
            lines += [f"    {side} {line}" for line in (reply.excerpt if reply is not None else ())]
    return "\n".join(lines)


def _failing(point: Point, side: str) -> str:
    scores = point.scores.get(side, {})
    shown = [f"{name} {value:.2f}" for name, value in scores.items() if value is not None]
    return ", ".join(shown)


def write_chart(report: EvalReport, path: str | Path) -> Path:
    """Draw each side's mean per score as grouped bars into the image ``path`` (PNG, or any format matplotlib
    writes by the suffix); needs the ``eval`` extra (matplotlib)."""
    values = {side: {name: report.summary[side][name].mean for name in SCORES} for side in report.sides}
    points = sum(len(conversation.points) for conversation in report.conversations)
    title = f"Each side's mean score over {points} point(s) of {len(report.conversations)} conversation(s)"
    return bar_chart(values, path, title=title, ylabel="mean over points", lower_is_better=LOWER_IS_BETTER)


def bar_chart(
    values: Mapping[str, Mapping[str, float | None]],
    path: str | Path,
    *,
    title: str,
    ylabel: str,
    lower_is_better: Collection[str] = (),
) -> Path:
    """Grouped bars on a 0 to 1 scale, one group per measure and one bar per side (``values[side][measure]``),
    each labelled with its value, written to the image ``path`` under ``title``. A value of 0 still shows (a
    sliver and its label); a measure that does not apply to a side (``None``) is labelled ``n/a`` where its bar
    would be, never left out unsaid. The legend sits below the bars, never over them."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("the chart needs the eval extra (pip install 'dial-runtime[eval]')") from None
    sides = list(values)
    names = list(dict.fromkeys(name for side in sides for name in values[side]))
    figure, axes = plt.subplots(figsize=(min(12.0, max(6.5, 2.0 + 0.5 * len(names) * len(sides))), 4.4), dpi=120)
    width = 0.8 / max(len(sides), 1)
    for offset, side in enumerate(sides):
        places = [index + offset * width for index in range(len(names))]
        shown = [values[side].get(name) for name in names]
        heights = [0.0 if value is None else max(value, 0.008) for value in shown]  # a zero still shows
        bars = axes.bar(places, heights, width=width, label=side)
        labels = ["n/a" if value is None else f"{value:.2f}" for value in shown]
        axes.bar_label(bars, labels=labels, fontsize=7, padding=2, rotation=90 if len(sides) > 2 else 0)
    axes.set_xticks([index + width * (len(sides) - 1) / 2 for index in range(len(names))])
    axes.set_xticklabels(
        [f"{name}\n(lower best)" if name in lower_is_better else name for name in names], fontsize=8
    )
    axes.set_ylim(0, 1.18)
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=max(1, min(len(sides), 4)))
    figure.tight_layout()
    target = Path(path)
    figure.savefig(target, bbox_inches="tight")
    plt.close(figure)
    return target


def markdown(report: EvalReport, chart: str | None = None) -> str:
    """The readable report as Markdown: the chart (an image beside it) and the text report."""
    parts = ["# Evaluation", ""]
    if chart is not None:
        parts += [f"![each side's mean per score]({chart})", ""]
    parts += ["```", str(report), "```", ""]
    return "\n".join(parts)
