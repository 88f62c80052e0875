"""The exact output law of shuffled binary randomized response with clients holding records.

Every client holds m binary records (or each its own count). In a round some clients
answer (all of them, k of n drawn uniformly without replacement, or each independently with
probability q); each answering client sends s of its records (all, if it holds fewer),
drawn uniformly without replacement, and each
sent record yields one message per stream: its bit through ε0-randomized response (2RR,
P(report 1) = e^ε0/(1+e^ε0) for a 1, 1/(1+e^ε0) for a 0), independently per stream. Each
stream is shuffled, so the analyzer sees each stream's count of ones (and, under Poisson
sampling, how many messages there were). At user level (s = m = 1) a client is a user.

The law is a generating function over clients: a client with a ones contributes
Σ_h Hyp(h; m, a, s) · Π_streams (1 − p1 + p1 z)^h (1 − p0 + p0 z)^(s−h), and the sample
mixes the clients' products by elementary symmetric sums (uniform, Poisson) or multiplies
them all. Everything is a sum of non-negative terms, so every cell keeps its relative
precision, down to the smallest (no cancellation).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import signal, special, stats


def _stream_pmf(ones: int, zeros: int, eps0: float) -> np.ndarray:
    """Law of one stream's count of ones from `ones` 1-records and `zeros` 0-records."""
    p1, p0 = 1.0 / (1.0 + math.exp(-eps0)), 1.0 / (1.0 + math.exp(eps0))
    return np.convolve(stats.binom.pmf(np.arange(ones + 1), ones, p1), stats.binom.pmf(np.arange(zeros + 1), zeros, p0))


def client_law(ones: int, m: int, s: int, eps0: float, streams: int) -> np.ndarray:
    """Joint law of the streams' counts of ones of one answering client holding `ones` 1-records of m.

    Returns:
      An array of shape (s + 1,) * streams: [c_1, …, c_streams] → probability.
    """
    law = np.zeros((s + 1,) * streams)
    for h in range(max(0, s - (m - ones)), min(s, ones) + 1):
        stream = _stream_pmf(h, s - h, eps0)
        joint = stream
        for _ in range(streams - 1):
            joint = np.multiply.outer(joint, stream)
        law += stats.hypergeom.pmf(h, m, ones, s) * joint
    return law


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return signal.convolve(a, b, method="direct")


def _symmetric_sums(laws: list[np.ndarray], most: int) -> list[np.ndarray]:
    """e_j = Σ over j-subsets of the clients of the convolution of their laws, j = 0..most."""
    sums = [np.ones((1,) * laws[0].ndim)] + [None] * most
    for law in laws:
        for j in range(most, 0, -1):
            if sums[j - 1] is not None:
                term = _convolve(sums[j - 1], law)
                sums[j] = term if sums[j] is None else _pad_add(sums[j], term)
    return sums


def _pad_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape))
    out = np.zeros(shape)
    out[tuple(slice(0, x) for x in a.shape)] += a
    out[tuple(slice(0, x) for x in b.shape)] += b
    return out


def output_law(ones: list[int], m, s: int, eps0: float, streams: int = 1, sampling: str = "all",
               clients: int = 0, rate: float = 0.0) -> np.ndarray:
    """The analyzer's view's law: the streams' counts of ones (Poisson: and the number of answering clients).

    Args:
      ones: each client's count of 1-records (0..its records).
      m: the records each client holds (one number, or one per client).
      s: records sent per answering client (all of them if it holds fewer).
      eps0: each message's randomized-response ε0.
      streams: independent messages per sent record.
      sampling: "all", "uniform" (`clients` of len(ones)) or "poisson" (each at `rate`).

    Returns:
      Probabilities, flattened (Poisson: every joiner count's block in turn); they sum to 1.
    """
    held = list(m) if isinstance(m, (list, tuple)) else [m] * len(ones)
    laws = [client_law(a, h, min(s, h), eps0, streams) for a, h in zip(ones, held)]
    n = len(ones)
    if sampling == "all":
        return _symmetric_sums(laws, n)[n].ravel()
    if sampling == "uniform":
        return (_symmetric_sums(laws, clients)[clients] / special.comb(n, clients, exact=True)).ravel()
    sums = _symmetric_sums(laws, n)
    return np.concatenate([sums[j].ravel() * rate**j * (1.0 - rate) ** (n - j) for j in range(n + 1)])


def renyi(p: np.ndarray, q: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """D_α(P ‖ Q) = log Σ P^α Q^(1−α) / (α − 1) at each order, in log space (P, Q > 0 on one support)."""
    if not (np.all(q > 0.0) and np.all(p > 0.0)):
        raise ValueError("the laws must be positive everywhere (underflow: choose a smaller instance)")
    log_p, log_q = np.log(p), np.log(q)
    return special.logsumexp(orders[:, None] * (log_p - log_q)[None, :] + log_q[None, :], axis=1) / (orders - 1.0)
