"""A linear-programming minimax lower bound for the lower-bound instances
(pipeline/problems/hard.py), pure numpy/scipy: the least Bayes risk of any
(ε, δ)-DP algorithm on one coordinate of the instance, computed as a linear
program over the algorithm's output law on each dataset, with every relaxation
taken in the direction that can only lower the program's minimum, so that what
is returned is a certified lower bound. hard.py uses it as max(this, the closed
form of lower_bounds.py).

The one-coordinate problem. Fix the private construction's masses α = q,
β = 0 (γ = 1: every non-zero point points along v; with γ < 1, i.e. a `mass`
option, β > 0 and hard.py keeps the closed form). n users, each independently
+1 with probability q and 0 otherwise under v = +1, and −1 / 0 under v = −1
(the data is x/R along e_j). v is uniform on {±1}. An algorithm M (any
measurable map from the dataset, with its own coins, to an output) is
(ε, δ)-DP for replace-one neighbours. Two losses (scaled to μ = 1):
  estimation: ℓ_v(θ) = ½(θ − v)², θ ∈ ℝ         (strongly convex instance);
  testing:    ℓ_v(θ) = 1{θ ≠ v}, θ ∈ {±1}        (convex instance).
r(n, q, ε, δ) := inf_M ½ Σ_v E_{X ~ P_v^n} E ℓ_v(M(X)), the Bayes risk.
The steps, each with why it keeps a lower bound on r:

1. Counts suffice (exact). For M DP, let M̄(X) = M(πX), π a uniform random
   permutation of the users (its own coin). For each π, πX and πX' are
   neighbours when X, X' are, so P[M̄(X) ∈ S] = avg_π P[M(πX) ∈ S] ≤
   avg_π (e^ε P[M(πX') ∈ S] + δ) = e^ε P[M̄(X') ∈ S] + δ: M̄ is DP. P_v^n is
   exchangeable, so E ℓ_v(M(πX)) = E ℓ_v(M(X)) for every π: same risk (a
   mixture; no convexity needed). M̄ depends on X only through its counts
   (a, b) = (#users at +1, #users at −1) (the 0s are n − a − b), and two count
   vectors are neighbours iff one user moves between categories: the six moves
   (±1, 0), (0, ±1), ±(1, −1). Under v = +1 the data has counts (K, 0),
   K ~ Binomial(n, q), and (0, K) under v = −1; the other states carry no
   prior mass but their constraints bind the ones that do. The graph distance
   between count vectors is D = (|Δa| + |Δb| + |Δa + Δb|)/2 (a user moved per
   unit, a move between ±1 changing two counts).
   Only datasets with entries in {+1, 0, −1} are constrained (a relaxation:
   fewer constraints; it is also exact, since any M on them extends by
   rounding each user's point to the nearest of the three, which maps
   neighbours to neighbours or to the same dataset).
2. Symmetry (exact). M'(X) = −M(−X) is DP with the same Bayes risk (the prior,
   the law and the losses are symmetric under v → −v, x → −x, θ → −θ); so is
   the mixture ½(M + M'). So the output law p_{(b,a)} is the mirror image of
   p_{(a,b)}, and p_{(j,j)} is symmetric: only a ≥ b is stored.
3. Outputs on a grid (estimation; the testing outputs are already ±1).
   (a) Projecting θ onto [−1, 1] (post-processing) lowers ½(θ − v)² for both v.
   (b) Randomized rounding to the grid g_0 < … < g_{G−1} of spacing h = 2/(G−1)
       on [−1, 1]: θ ∈ [g_i, g_{i+1}] goes to g_{i+1} with probability
       (θ − g_i)/h (own coin: post-processing, keeps DP and step 2's
       symmetry on a symmetric grid). E[rounded] = θ and its variance is
       (θ − g_i)(g_{i+1} − θ) ≤ h²/4, so E ½(rounded − v)² = ½(θ − v)² +
       ½ Var ≤ ½(θ − v)² + h²/8. So the grid minimum LP_G ≤ r + h²/8, and
       r ≥ LP_G − h²/8: `estimation_risk` subtracts h²/8.
4. The program's constraints, each implied by DP for the kept states (so the
   program's feasible set contains every DP mechanism's rounded law and its
   minimum is ≤ the true one):
   - kept states (a ≥ b, a + b in the window of step 5): the line (k, 0),
     the strip b ≤ STRIP and the band a − b ≤ BAND (dropping the other states
     and every constraint through them only enlarges the feasible set);
   - every pair (s, t) of kept states that are neighbours (D = 1), and every
     pair on one anti-diagonal a + b = const with s in the strip, at their
     distance D: group privacy (Dwork–Roth Thm 2.2 with the δ of the path,
     lower_bounds.group_delta) gives P[M(s) ∈ S] ≤ e^{Dε} P[M(t) ∈ S] + δ_D for
     all S; the program keeps it for the singletons S = {g} only:
     p_s(g) ≤ e^{Dε} p_t(g) + δ_D (exact for δ = 0; for δ > 0 it drops the
     sum Σ_g (p_s(g) − e^{Dε} p_t(g))_+ ≤ δ_D, so it is weaker, and on the
     instances it lowers the minimum by ~3·10⁻⁵ relative at δ = 10⁻⁶);
     constraints with e^{Dε} > EXP_CAP or δ_D ≥ 1 are dropped (weaker still);
   - p_s is a probability vector; a state on the diagonal is symmetric.
5. The window. States with a + b outside [lo, hi], the Binomial's TAIL and
   1 − TAIL quantiles, are dropped, with their objective terms (the loss is
   ≥ 0, so the objective only falls) and constraints (weaker): the program
   charges only Σ_{k ∈ [lo, hi]} P[K = k]·E_{p_k} ℓ_+.
6. The solver's tolerance. HiGHS's optimum can sit slightly on either side of
   the program's. Weak duality gives a certificate instead: with the solver's
   duals y_ub clipped to ≤ 0, y_eq as given, reduced costs r = c − A_ubᵀy_ub −
   A_eqᵀy_eq and every variable in [0, 1] (a probability), every feasible x has
   cᵀx = y_ubᵀA_ub x + y_eqᵀA_eq x + rᵀx ≥ b_ubᵀy_ub + b_eqᵀy_eq + Σ_j min(r_j, 0).
   That number (less 10⁻¹² of the magnitudes it sums, for float64 rounding) is
   the program's certified value, whatever the solver's accuracy.

So `estimation_risk` ≤ r for the estimation loss and `testing_error` ≤ r for
the testing loss (the least mean of the two testing errors of a DP test).
Where the program cannot run (its window needs more than MAX_STATES states, or
HiGHS stops without an optimum) the functions return None and the caller keeps
its closed form.

How much is lost. The full count triangle (STRIP = None) is, up to the charges
of steps 3, 5 and 6, the exact minimax risk; tests/test_minimax_bound.py checks
it against a brute force over ordered datasets for n ≤ 5. It is used where it
has at most FULL_STATES stored states (ε ≳ 0.3 at δ = 10⁻⁶: 90 states at ε = 1,
0.2 s; 210 at ε = 0.3, 1.2 s). Below, the window is too wide for it (1,793
states at ε = 0.05, 244 s), and the strip and band (198 states, 1 s) keep 93%
of it (n = 2,000, ε = 0.05: 1.180·10⁻⁴ against 1.274·10⁻⁴). From above, a real
ε-DP mechanism (θ̂ = clip(c·(a − b) + Laplace(2c/ε)) tuned over c) has risk
1.12×, 1.05× and 1.09× the bound at ε = 0.05, 0.3 and 1 (n = 2,000), so the
minimax risk lies within those factors of it.

Results are cached by their arguments (functools.lru_cache, per process).
"""
from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

# Imported inside the functions: scipy.stats and scipy.optimize cost a second per process, and
# shard actors that unpickle a hard instance must not pay it (tests/test_architecture.py).

GRID = 15  # estimation outputs: G points on [−1, 1] (discretisation charge h²/8 = 1/(2(G−1)²) = 0.0026)
TAIL = 1e-6  # probability of K below the window and again above it
FULL_STATES = 220  # the full count triangle where it has at most this many stored states (ε ≳ 0.3 at δ = 10⁻⁶) …
STRIP = 1  # … else kept states: b ≤ STRIP …
BAND = 1  # … or a − b ≤ BAND (and the line b = 0)
EXP_CAP = 1e6  # constraints with e^{Dε} above this are dropped (a relaxation; keeps the program well scaled)
MAX_STATES = 600  # larger programs (ε ≲ 0.01) fall back to the caller's closed form
TIME_LIMIT_S = 60.0
# Six moves of one user between the categories +1, −1, 0: (Δa, Δb).
_MOVES = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, -1), (-1, 1))


@dataclasses.dataclass(frozen=True)
class ProgramBound:
    """A certified lower bound on the one-coordinate Bayes risk, and how it was reached.

    Attributes:
      value: the certified lower bound (dual certificate − discretisation charge, ≥ 0).
      primal: HiGHS's reported optimum of the grid program (not certified).
      certificate: the weak-duality bound on the grid program's minimum (step 6).
      discretisation: what step 3 subtracts (0 for testing).
      formulation: the kept states, in words.
      window: (lo, hi), the anti-diagonals a + b kept.
      dropped_mass: P[K ∉ [lo, hi]].
      states, grid, constraints: the program's size.
      seconds: the time to build and solve it.
    """

    value: float
    primal: float
    certificate: float
    discretisation: float
    formulation: str
    window: tuple[int, int]
    dropped_mass: float
    states: int
    grid: int
    constraints: int
    seconds: float


def graph_distance(s: tuple[int, int], t: tuple[int, int]) -> int:
    """D between count vectors (a, b): users to move, (|Δa| + |Δb| + |Δa + Δb|)/2."""
    da, db = t[0] - s[0], t[1] - s[1]
    return (abs(da) + abs(db) + abs(da + db)) // 2


def window(users: int, flip: float, tail: float = TAIL) -> tuple[int, int]:
    """[lo, hi] with P[K < lo], P[K > hi] ≤ tail, K ~ Binomial(users, flip)."""
    import scipy.stats

    lo = int(scipy.stats.binom.ppf(tail, users, flip))
    hi = int(scipy.stats.binom.isf(tail, users, flip)) + 1
    return max(lo - 1, 0), min(hi, users)


def kept_states(lo: int, hi: int, strip: int | None = STRIP, band: int = BAND) -> list[tuple[int, int]]:
    """The stored states (a ≥ b), a + b ∈ [lo, hi]: the line, the strip b ≤ strip and the band
    a − b ≤ band; strip None: all of them (the full count triangle)."""
    return [(total - b, b) for total in range(lo, hi + 1) for b in range(total // 2 + 1)
            if strip is None or b <= strip or total - 2 * b <= band]


def _canonical(state: tuple[int, int]) -> tuple[tuple[int, int], bool]:
    """(stored state, mirrored?): (b, a) is stored as (a, b) with the output mirrored."""
    return (state, False) if state[0] >= state[1] else ((state[1], state[0]), True)


def constraint_pairs(states: list[tuple[int, int]], strip: int | None = STRIP) -> list[tuple[int, int, bool, int]]:
    """Directed pairs (i, j, mirrored, D) of stored states: p_i(g) ≤ e^{Dε} p_j(σg) + δ_D, σ the mirror if mirrored.

    Neighbours (D = 1) among kept states, every pair on one anti-diagonal with a strip state
    (both directions; none for the full triangle, strip None, where neighbours' chains imply
    them), and each diagonal state with its own mirror (D = 0: symmetric).
    """
    index = {state: i for i, state in enumerate(states)}
    kept = set(states) | {(b, a) for a, b in states}
    pairs: set[tuple[int, int, bool, int]] = set()

    def add(s, t, distance):
        (cs, ms), (ct, mt) = _canonical(s), _canonical(t)
        pairs.add((index[cs], index[ct], ms != mt, distance))
        pairs.add((index[ct], index[cs], ms != mt, distance))

    by_total: dict[int, list[tuple[int, int]]] = {}
    for state in kept:
        by_total.setdefault(sum(state), []).append(state)
    for s in states:
        for da, db in _MOVES:
            t = (s[0] + da, s[1] + db)
            if t in kept:
                add(s, t, 1)
        if s[0] == s[1]:
            pairs.add((index[s], index[s], True, 0))
        if strip is not None and s[1] <= strip:
            for t in by_total[sum(s)]:
                if t != s:
                    add(s, t, graph_distance(s, t))
    return sorted(pairs)


_AUTO = "auto"


def formulation_of(strip: int | None, band: int) -> str:
    """The program's kept states, in words."""
    return "full count triangle" if strip is None else f"count states b ≤ {strip} or a − b ≤ {band}"


def _solve(users: int, flip: float, epsilon: float, delta: float, loss: np.ndarray,
           strip: int | None | str, band: int, tail: float) -> ProgramBound | None:
    """The program of steps 1–6 for the loss at v = +1 on a symmetric grid (loss[::-1] is v = −1's).

    strip "auto": the full triangle where it has at most FULL_STATES states, else STRIP and BAND.
    """
    import scipy.optimize
    import scipy.sparse
    import scipy.stats

    from pipeline.problems import lower_bounds

    started = time.perf_counter()
    grid = len(loss)
    lo, hi = window(users, flip, tail)
    if strip == _AUTO:
        strip = None if len(kept_states(lo, hi, None)) <= FULL_STATES else STRIP
    states = kept_states(lo, hi, strip, band)
    if len(states) > MAX_STATES:
        return None
    pairs = np.array(constraint_pairs(states, strip), dtype=np.int64).reshape(-1, 4)
    distance = pairs[:, 3].astype(float)
    factor = np.exp(np.minimum(distance * epsilon, 700.0))
    slack = lower_bounds.group_delta(distance, epsilon, delta)
    useful = (factor <= EXP_CAP) & (slack < 1.0)
    pairs, factor, slack = pairs[useful], factor[useful], slack[useful]
    # One row per pair and output g: p_i(g) − e^{Dε} p_j(σg) ≤ δ_D.
    g = np.tile(np.arange(grid), len(pairs))
    i, j = np.repeat(pairs[:, 0], grid), np.repeat(pairs[:, 1], grid)
    target = np.where(np.repeat(pairs[:, 2], grid) == 1, grid - 1 - g, g)
    keep = ~((i == j) & (target == g))  # p(g) ≤ e^{Dε} p(g) + δ_D holds for every p
    i, j, g, target = i[keep], j[keep], g[keep], target[keep]
    rows = len(g)
    variables = len(states) * grid
    upper = scipy.sparse.csr_matrix(
        (np.concatenate([np.ones(rows), -np.repeat(factor, grid)[keep]]),
         (np.tile(np.arange(rows), 2), np.concatenate([i * grid + g, j * grid + target]))),
        shape=(rows, variables))
    upper_rhs = np.repeat(slack, grid)[keep]
    equality = scipy.sparse.csr_matrix(
        (np.ones(variables), (np.repeat(np.arange(len(states)), grid), np.arange(variables))),
        shape=(len(states), variables))
    prior = scipy.stats.binom.pmf(np.arange(lo, hi + 1), users, flip)
    index = {state: n for n, state in enumerate(states)}
    cost = np.zeros((len(states), grid))
    cost[[index[(k, 0)] for k in range(lo, hi + 1)]] = prior[:, None] * loss[None, :]
    cost = cost.ravel()
    solved = scipy.optimize.linprog(cost, A_ub=upper, b_ub=upper_rhs, A_eq=equality, b_eq=np.ones(len(states)),
                                    bounds=(0, None), method="highs-ipm", options={"time_limit": TIME_LIMIT_S})
    if solved.status != 0:
        return None
    # Step 6: a weak-duality certificate from the solver's duals, every variable in [0, 1].
    dual_upper = np.minimum(solved.ineqlin.marginals, 0.0)
    dual_equal = solved.eqlin.marginals
    reduced = cost - upper.T @ dual_upper - equality.T @ dual_equal
    terms = np.concatenate([upper_rhs * dual_upper, dual_equal, np.minimum(reduced, 0.0)])
    magnitude = float((abs(upper).T @ np.abs(dual_upper)).sum() + np.abs(dual_equal).sum() + np.abs(terms).sum())
    certificate = float(terms.sum()) - 1e-12 * magnitude
    return ProgramBound(value=max(certificate, 0.0), primal=float(solved.fun), certificate=certificate,
                        discretisation=0.0, formulation=formulation_of(strip, band), window=(lo, hi),
                        dropped_mass=float(max(1.0 - prior.sum(), 0.0)), states=len(states), grid=grid,
                        constraints=rows, seconds=time.perf_counter() - started)


@functools.lru_cache(maxsize=256)
def estimation_risk(users: int, flip: float, epsilon: float, delta: float, grid: int = GRID,
                    strip: int | None | str = _AUTO, band: int = BAND, tail: float = TAIL) -> ProgramBound | None:
    """A certified lower bound on min_M ½ Σ_v E ½(M(X) − v)² over (ε, δ)-DP M (module docstring).

    Multiply by μ² for the instance's scale: the problem with target μ·v has risk μ²× this.

    Args:
      users: n.
      flip: q, the probability of a user at +1 (at −1 under v = −1).
      epsilon, delta: the algorithm's (ε, δ).
      grid: G, odd (outputs on [−1, 1]; the charge is h²/8 = 1/(2(G−1)²)).
      strip, band: the kept states (strip None: the full triangle; "auto": FULL_STATES decides).
      tail: the window's tail probability.

    Returns:
      The bound and its derivation's numbers, or None where the program cannot run.
    """
    outputs = np.linspace(-1.0, 1.0, grid)
    found = _solve(users, flip, epsilon, delta, 0.5 * (outputs - 1.0) ** 2, strip, band, tail)
    if found is None:
        return None
    charge = (2.0 / (grid - 1)) ** 2 / 8.0
    return dataclasses.replace(found, value=max(found.certificate - charge, 0.0), discretisation=charge)


@functools.lru_cache(maxsize=256)
def testing_error(users: int, flip: float, epsilon: float, delta: float, strip: int | None | str = _AUTO,
                  band: int = BAND, tail: float = TAIL) -> ProgramBound | None:
    """A certified lower bound on the least mean of the two errors of an (ε, δ)-DP test of v (module docstring).

    Args:
      users, flip, epsilon, delta, strip, band, tail: as estimation_risk.

    Returns:
      The bound, or None where the program cannot run.
    """
    return _solve(users, flip, epsilon, delta, np.array([1.0, 0.0]), strip, band, tail)  # outputs (−1, +1)
