"""RTStream's QoS negotiation and refinement (seed 000, sections 4.3-4.4) worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from cqopt.errors import CqoptError
from cqopt.runtime.overload.qos_negotiation import (QualityTable, QueryInstance, chain_seconds,
                                                    kept_fraction, negotiate, refine,
                                                    retained_fraction)

# The paper's three curves (Figure 6): at QoS 70% Q0 drops 75%, Q1 30%, Q2 3%.
CONVEX = [(1.0, 0.0), (0.7, 0.75), (0.0, 1.0)]
LINEAR = [(1.0, 0.0), (0.0, 1.0)]
CONCAVE = [(1.0, 0.0), (0.7, 0.03), (0.0, 1.0)]


def chain(full_seconds: float):
    """A chain plan's time is linear in the kept share of its input (equation 1)."""
    return lambda kept: full_seconds * float(kept[0])


def three_queries(deadline: float = 1.0) -> list[QueryInstance]:
    return [QueryInstance(QualityTable.from_rows("Q0", CONVEX), deadline, chain(0.6)),
            QueryInstance(QualityTable.from_rows("Q1", LINEAR), deadline, chain(0.5)),
            QueryInstance(QualityTable.from_rows("Q2", CONCAVE), deadline, chain(0.3))]


def test_the_papers_drop_ratios_at_70_percent():
    drops = [float(QualityTable.from_rows(q, rows).drops_at(0.7)[0])
             for q, rows in (("Q0", CONVEX), ("Q1", LINEAR), ("Q2", CONCAVE))]
    assert drops == pytest.approx([0.75, 0.3, 0.03])


def test_negotiation_worked_by_hand():
    """Full times 0.6 + 0.5 + 0.3 = 1.4 s for a 1 s deadline (140% load). Steps of 10%:
    at 90% the drops are 25%, 10%, 1%: 0.45 + 0.45 + 0.297 = 1.197 s, too much;
    at 80% they are 50%, 20%, 2%: 0.3 + 0.4 + 0.294 = 0.994 s, which fits."""
    result = negotiate(three_queries(), now=0.0, step=0.1)
    assert result.level == 0.8 and result.met and result.misses == []
    assert {q: float(d[0]) for q, d in result.drops.items()} == pytest.approx(
        {"Q0": 0.5, "Q1": 0.2, "Q2": 0.02})
    assert result.seconds == pytest.approx({"Q0": 0.3, "Q1": 0.4, "Q2": 0.294})
    # Pseudo-deadlines in proportion to estimated times: budgets T_i / 0.994 of the 1 s.
    budgets = np.diff([0.0] + [result.pseudo_deadlines[q] for q in ("Q0", "Q1", "Q2")])
    assert budgets == pytest.approx(np.array([0.3, 0.4, 0.294]) / 0.994)
    assert result.pseudo_deadlines["Q2"] == pytest.approx(1.0)
    assert result.quality == pytest.approx({"Q0": 0.8, "Q1": 0.8, "Q2": 0.8})
    # In 1% steps: 1.4 − 2.03·(1 − L) <= 1 first holds at L = 0.80 too.
    assert negotiate(three_queries(), step=0.01).level == pytest.approx(0.80)


def test_no_overload_keeps_full_quality():
    result = negotiate(three_queries(deadline=2.0))
    assert result.level == 1.0 and result.met
    assert all(float(d[0]) == 0.0 for d in result.drops.values())
    assert result.average_quality == 1.0
    assert result.pseudo_deadlines["Q2"] == pytest.approx(2.0)  # the slack is shared out


def test_impossible_deadline_runs_at_least_qos_and_counts_misses():
    """Both tables stop at 50% quality (50% dropped): a needs 0.2 s by 0.25 s, b 0.3 s by
    0.3 s. In deadline order a finishes at 0.2 (met), b at 0.5 (missed)."""
    floor = [(1.0, 0.0), (0.5, 0.5)]
    instances = [QueryInstance(QualityTable.from_rows("b", floor), 0.3, chain(0.6)),
                 QueryInstance(QualityTable.from_rows("a", floor), 0.25, chain(0.4))]
    result = negotiate(instances, step=0.1)
    assert not result.met and result.level == 0.5
    assert result.misses == ["b"]
    assert result.pseudo_deadlines == pytest.approx({"a": 0.2, "b": 0.5})
    assert result.quality == {"a": 0.5, "b": 0.0}
    assert result.average_quality == 0.25


def test_deadlines_in_earliest_deadline_first_order():
    """The load fits only if the earlier deadline goes first: a 0.4 s by 0.5, b 0.5 s by 1.
    Finish times 0.4 and 0.9; the stretch is min(0.5/0.4, 1/0.9) = 10/9, so the
    pseudo-deadlines are 0.4·10/9 and 0.9·10/9 = 1."""
    table = [(1.0, 0.0), (0.0, 1.0)]
    result = negotiate([QueryInstance(QualityTable.from_rows("b", table), 1.0, chain(0.5)),
                        QueryInstance(QualityTable.from_rows("a", table), 0.5, chain(0.4))])
    assert result.level == 1.0 and result.met
    assert result.pseudo_deadlines == pytest.approx({"a": 4 / 9, "b": 1.0})


def test_equation_1_and_2_by_hand():
    # 1000 tuples: 1000·0.001 + 500·0.002 + 100·0.01 = 3 s; from operator 2 with 100 waiting.
    assert chain_seconds(1000, [0.001, 0.002, 0.01], [0.5, 0.2, 0.0]) == pytest.approx(3.0)
    assert chain_seconds(100, [0.001, 0.002, 0.01], [0.5, 0.2, 0.0], start=1) == pytest.approx(0.4)
    assert kept_fraction(0.75, 3.0) == 0.25 and kept_fraction(3.0, 3.0) == 1.0
    assert retained_fraction([0.8, 0.5]) == pytest.approx(0.4)  # section 5.2.2's example


def test_refinement_of_a_chain_keeps_d_over_t():
    table = QualityTable.from_rows("q", [(1.0, 0.0), (0.6, 0.8)])
    instance = QueryInstance(table, 1.0, lambda kept: chain_seconds(1000 * kept[0],
                                                                    [0.001, 0.002, 0.01],
                                                                    [0.5, 0.2, 0.0]))
    refined = refine(instance, remaining=1.5)
    assert refined.kept.tolist() == pytest.approx([0.5]) and refined.met
    assert refined.seconds == pytest.approx(1.5)
    assert refined.quality == pytest.approx(1.0 - 0.5 / 0.8 * 0.4)
    floor = refine(instance, remaining=0.3)  # would need 10%; the table stops at 20%
    assert floor.kept.tolist() == pytest.approx([0.2]) and not floor.met


def test_refinement_of_a_join_drops_in_the_tables_ratio():
    """Table: at 50% quality drop 40% of S and 20% of T. Time 0.2·kS + 0.2·kT + 1.6·kS·kT.
    At 75% (drops 20%, 10%): 0.16 + 0.18 + 1.6·0.72 = 1.492 s."""
    table = QualityTable.from_rows("j", [(1.0, 0.0, 0.0), (0.5, 0.4, 0.2)], inputs=("S", "T"))
    instance = QueryInstance(table, 10.0, lambda k: 0.2 * k[0] + 0.2 * k[1] + 1.6 * k[0] * k[1])
    refined = refine(instance, remaining=1.492)
    assert refined.kept == pytest.approx([0.8, 0.9], abs=1e-6)
    assert (1 - refined.kept[0]) / (1 - refined.kept[1]) == pytest.approx(2.0)
    assert refined.quality == pytest.approx(0.75, abs=1e-6) and refined.met
    too_short = refine(instance, remaining=1.0)  # even 50% needs 1.048 s
    assert too_short.kept == pytest.approx([0.6, 0.8]) and not too_short.met
    assert refine(instance, remaining=2.0).kept.tolist() == [1.0, 1.0]


def test_a_join_counts_its_worse_branch():
    table = QualityTable.from_rows("j", [(0.5, 0.4, 0.2)], inputs=("S", "T"))
    assert table.quality_of([0.2, 0.1]) == pytest.approx(0.75)
    assert table.quality_of([0.2, 0.15]) == pytest.approx(0.625)  # T dropped too much
    assert table.quality_of([0.0, 0.0]) == 1.0


@pytest.mark.parametrize("rows, message", [
    ([(1.0, 0.0), (0.8, 0.3), (0.6, 0.2)], "query 'q', row 3: drops 0.2 of input 'input', less "
                                           "than row 2's 0.3"),
    ([(1.0, 0.0), (0.8, 0.3), (0.9, 0.4)], "query 'q', row 3: quality 0.9 is not below row 2"),
    ([(1.0, 0.0), (0.8, 1.3)], "query 'q', row 2: quality and drop ratios must lie in"),
    ([(1.0, 0.0, 0.0)], "query 'q', row 1: expected a quality and 1 drop"),
    ([], "query 'q' is empty"),
])
def test_a_bad_table_is_refused_naming_query_and_row(rows, message):
    with pytest.raises(CqoptError, match=message.replace("(", r"\(")):
        QualityTable.from_rows("q", rows)


def test_bad_negotiation_input():
    with pytest.raises(CqoptError, match="step"):
        negotiate(three_queries(), step=0.0)
    with pytest.raises(CqoptError, match="share a name"):
        negotiate(three_queries() + three_queries()[:1])
