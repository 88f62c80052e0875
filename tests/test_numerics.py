"""pipeline.numerics: column sums with the same bits for any number of columns, which the
compiled rounds' twins (pipeline.compiled) and the Python path share, and the
accountants' logsumexp, scipy's bit for bit."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pipeline.numerics import column_dots, column_norms, column_sums, logsumexp


def _in_order(a: np.ndarray, b: np.ndarray) -> list[float]:
    """Each column's products added one by one from the first coordinate, in Python floats."""
    sums = []
    for column in range(a.shape[1]):
        total = 0.0
        for x, y in zip(a[:, column].tolist(), b[:, column].tolist()):
            total += x * y
        sums.append(total)
    return sums


@pytest.mark.parametrize("dim", [1, 2, 3, 7, 10, 33, 100, 257])
@pytest.mark.parametrize("columns", [1, 2, 5])
def test_column_dots_add_each_column_in_order_for_any_number_of_columns(dim, columns):
    rng = np.random.default_rng(dim * 10 + columns)
    a, b = rng.standard_normal((dim, columns)) * 1e3, rng.standard_normal((dim, columns))
    assert column_dots(a, b).tolist() == _in_order(a, b)
    assert column_norms(a).tolist() == np.sqrt(_in_order(a, a)).tolist()


def test_a_column_alone_has_the_bits_it_has_among_others():
    """einsum sums a lone column in SIMD lanes: over many draws some of its sums differ from
    the in-order sum (so this test would catch einsum here), and column_dots' never do."""
    rng = np.random.default_rng(5)
    einsum_differs = 0
    for _ in range(200):
        wide = rng.standard_normal((int(rng.integers(4, 200)), 3)) * 1e3
        alone = wide[:, :1].copy()
        assert column_dots(alone, alone)[0] == column_dots(wide, wide)[0]
        einsum_differs += np.einsum("ij,ij->j", alone, alone)[0] != column_dots(wide, wide)[0]
    assert einsum_differs > 0


@pytest.mark.parametrize("dim", [1, 2, 7, 8, 9, 33, 257])
@pytest.mark.parametrize("columns", [1, 2, 5])
def test_column_sums_add_each_column_in_order_for_any_number_of_columns(dim, columns):
    values = np.abs(np.random.default_rng(dim * 10 + columns).standard_normal((dim, columns)) * 1e3)
    assert column_sums(values).tolist() == _in_order(values, np.ones_like(values))


def test_a_column_alone_sums_as_among_others_where_sum_would_not():
    """sum(axis=0) sums a lone column pairwise (eight accumulators from 8 rows on): some of its
    sums differ from the in-order sum, and column_sums' never do."""
    rng = np.random.default_rng(6)
    sum_differs = 0
    for _ in range(200):
        wide = np.abs(rng.standard_normal((int(rng.integers(9, 200)), 3)) * 1e3)
        alone = wide[:, :1].copy()
        assert column_sums(alone)[0] == column_sums(wide)[0]
        sum_differs += alone.sum(axis=0)[0] != column_sums(wide)[0]
    assert sum_differs > 0


def _same(a: float, b: float) -> bool:
    return a.hex() == b.hex() or (math.isnan(a) and math.isnan(b))


# Vectors as the accountants sum them (log-weights of one scale, ties at the top, −inf terms),
# and the edges: ±inf, NaN, huge and tiny entries.
_ENTRY = st.one_of(st.floats(-50.0, 50.0), st.sampled_from([-math.inf, 0.0, 700.0, 709.5, -745.0]),
                   st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=400, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 300), elements=_ENTRY), st.integers(0, 5))
def test_logsumexp_has_scipys_bits(values, ties):
    values[: min(ties, values.size)] = np.nanmax(values) if not np.isnan(values).all() else 0.0  # ties at the top
    np.random.default_rng(values.size).shuffle(values)
    assert _same(logsumexp(values), float(scipy.special.logsumexp(values)))


def test_logsumexp_on_draws_like_the_accountants_and_exact_cases():
    """Where scipy's steps (the top taken out of the sum, log1p) and the plain formula part:
    some of these draws' plain log(Σ exp(x − a)) + a differ from scipy's in the last bits,
    so a logsumexp that dropped a step would fail here."""
    rng = np.random.default_rng(8)
    plain_differs = 0
    for _ in range(300):
        values = rng.normal(0.0, 10.0 ** rng.uniform(-3, 2), int(rng.integers(1, 400)))
        values[rng.integers(0, values.size, int(rng.integers(0, 3)))] = values.max()
        assert _same(logsumexp(values), float(scipy.special.logsumexp(values)))
        plain_differs += np.log(np.exp(values - values.max()).sum()) + values.max() != logsumexp(values)
    assert plain_differs > 0
    assert logsumexp(np.array([0.0, 0.0])) == math.log(2.0)
    assert logsumexp(np.array([-math.inf, -math.inf])) == -math.inf
    assert logsumexp(np.array([1.0, math.inf])) == math.inf
    assert logsumexp(np.array([1e308, 1e308])) == 1e308 + math.log(2.0)
