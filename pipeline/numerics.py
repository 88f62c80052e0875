"""Reductions with the same bits whatever the array's shape (README, "Reproducibility").

numpy picks a reduction's summation order from the shape of its operands: the same
numbers summed as part of a wider array and alone can differ in their last bits. A
protocol's chunk of users may hold one user (the part of a round in one block), and the
compiled rounds (pipeline.compiled) twin the reductions below for any chunk.
"""
from __future__ import annotations

import numpy as np


def column_dots(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_i a[i, j]·b[i, j] of every column j, each product rounded and added to the running
    sum coordinate by coordinate, from the first.

    einsum("ij,ij->j") adds this way over two columns or more; a single column it sums as one
    contiguous dot product, in SIMD lanes, so a user alone in its chunk would get other bits
    than among others. That column is accumulated in order instead.

    Args:
      a, b: (d, n) arrays of one shape, d ≥ 1.

    Returns:
      The n sums.
    """
    if a.shape[1] != 1:
        return np.einsum("ij,ij->j", a, b)
    return np.add.accumulate(a[:, 0] * b[:, 0])[-1:]


def column_norms(vectors: np.ndarray) -> np.ndarray:
    """‖v_j‖₂ of every column of a (d, n) array, its squares summed as column_dots sums them."""
    return np.sqrt(column_dots(vectors, vectors))


def column_sums(values: np.ndarray) -> np.ndarray:
    """Σ_i values[i, j] of every column j, added row by row from the first.

    sum(axis=0) adds this way over two columns or more; a single column it sums pairwise, so a
    user alone in its chunk would get other bits than among others. That column is
    accumulated in order instead.

    Args:
      values: a (d, n) array, d ≥ 1.

    Returns:
      The n sums.
    """
    if values.shape[1] != 1:
        return values.sum(axis=0)
    return np.add.accumulate(values[:, 0])[-1:]


def ordered_dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ_i a[i]·b[i] of two vectors, each product rounded and added to the running sum from the first.

    `a @ b` calls the BLAS's dot product, whose summation order (SIMD lanes, unrolling) is the
    CPU kernel's, so its last bits differ between machines; this order is the same everywhere,
    and the compiled rounds (pipeline.compiled) twin it.

    Args:
      a, b: vectors of one length, at least 1.

    Returns:
      The sum, a float.
    """
    return float(np.add.accumulate(np.multiply(a, b))[-1])


def logsumexp(values: np.ndarray) -> float:
    """log Σ_i exp(values[i]) of a vector: scipy.special.logsumexp's result, bit for bit, at a
    fifth of its cost on the short vectors the Girgis curves sum in a loop over orders (12
    against 57 µs for 100 entries: scipy's array-API dispatch is the rest).

    The same steps as scipy's real, unweighted case (scipy 1.17, the pin of constraints.txt;
    tests/test_numerics.py compares the two bitwise): the m entries equal to the largest, a,
    are taken out of the sum, s = Σ exp(x_i − a) over the others (numpy's pairwise sum), and
    the result is (log1p(s/m) + log m) + a; where that is not finite (an entry +inf, all −inf
    or a NaN), log Σ exp(x_i) instead.

    Args:
      values: a float64 vector, at least one entry.

    Returns:
      The logarithm of the sum, a float.
    """
    top = values.max(keepdims=True)
    is_top = values == top
    with np.errstate(divide="ignore", invalid="ignore"):
        total = np.exp(np.where(is_top, -np.inf, values) - top).sum(keepdims=True)
        count = is_top.sum(keepdims=True).astype(np.float64)
        total = np.where(total == 0, total, total / count)
        out = float((np.log1p(total) + np.log(count) + top)[0])
        if not np.isfinite(out):
            out = float(np.log(np.exp(values).sum()))
    return out


# numpy's pairwise summation, element for element, in numba's subset: the compiled kernels and the
# problems' compiled losses call it (pipeline.compiled compiles it; nothing here loads
# numba). In Python, np.add.reduce of the same contiguous values is the same sum.

def block_sum(values, first, count):
    """numpy's pairwise sum of at most 128 elements: 8 accumulators, combined as a tree."""
    if count < 8:
        total = 0.0
        for index in range(count):
            total += values[first + index]
        return total
    partial = values[first: first + 8].copy()
    index = 8
    while index < count - count % 8:
        for lane in range(8):
            partial[lane] += values[first + index + lane]
        index += 8
    total = ((partial[0] + partial[1]) + (partial[2] + partial[3])) + ((partial[4] + partial[5]) + (partial[6] + partial[7]))
    while index < count:
        total += values[first + index]
        index += 1
    return total


def pairwise_sum(values, first, count):
    """numpy's pairwise sum of values[first: first + count] (np.add.reduce of a contiguous
    float64 array): blocks of at most 128 elements, halves (a multiple of 8 on the left)
    above. numpy recurses; this walks the same tree with a stack (numba cannot load a
    recursive function from its cache)."""
    if count <= 128:
        return block_sum(values, first, count)
    firsts, counts, visits = np.empty(64, np.int64), np.empty(64, np.int64), np.zeros(64, np.int64)
    sums = np.empty(64)
    firsts[0], counts[0], top, held = first, count, 0, 0
    while top >= 0:
        node_first, node_count = firsts[top], counts[top]
        if node_count <= 128:
            sums[held] = block_sum(values, node_first, node_count)
            held += 1
            top -= 1
            continue
        half = node_count // 2
        half -= half % 8
        visits[top] += 1
        if visits[top] == 1:  # the left half first
            top += 1
            firsts[top], counts[top], visits[top] = node_first, half, 0
        elif visits[top] == 2:
            top += 1
            firsts[top], counts[top], visits[top] = node_first + half, node_count - half, 0
        else:  # both halves summed: left + right
            held -= 1
            sums[held - 1] += sums[held]
            top -= 1
    return sums[0]


def project_to_ball(point, radius, squares):
    """π onto {‖θ‖₂ ≤ radius}, in place, in numba's subset: the norm is numpy's pairwise sum of
    the squares (np.add.reduce(θ·θ), the same bits on every CPU), and a point outside is scaled
    by radius/norm coordinate by coordinate (θ·(radius/norm)). `squares`: a scratch d-vector.
    What problems.base.ball_projection runs compiled and the compiled rounds inline."""
    dim = point.size
    for coordinate in range(dim):
        squares[coordinate] = point[coordinate] * point[coordinate]
    norm = np.sqrt(pairwise_sum(squares, 0, dim))
    if not norm <= radius:
        shrink = radius / norm
        for coordinate in range(dim):
            point[coordinate] *= shrink


def column_norms_into(values, dim, users, norms):
    """column_norms of a (d, users) array held flat in (coordinate, user) order, into norms[:users],
    in numba's subset: each column's squares added coordinate by coordinate (row by row: the
    compiler vectorizes the inner loop), then the square root."""
    norms[:users] = 0.0
    for coordinate in range(dim):
        row = values[coordinate * users: (coordinate + 1) * users]
        for user in range(users):
            norms[user] += row[user] * row[user]
    for user in range(users):
        norms[user] = np.sqrt(norms[user])
