"""Private variance-reduced Frank–Wolfe over the ℓ1 ball (seed 003, Algorithm 3, Theorem 6a)."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar, NamedTuple

import numpy as np

from pipeline import accounting as privacy  # submodules load on first use: shards never import dp_accounting
from pipeline.accounting.compositions import SEQUENTIAL
from pipeline.errors import ConfigError
from pipeline.optimizers.base import Optimizer, RoundGroup, Schedule
from pipeline.problems.base import Problem
from pipeline.protocols.base import NOISY_MAX


@dataclasses.dataclass(frozen=True)
class Node:
    """A vertex of phase t's tree, in pre-order (DFS(t) with the root first).

    Attributes:
      phase: t.
      depth: j = |s|.
      right: whether it is a right child (draws fresh users); the root draws too.
      users: its users (0 for left children, which copy their parent).
      leaf: whether a noisy Frank–Wolfe step follows it (j = t).
    """

    phase: int
    depth: int
    right: bool
    users: int
    leaf: bool

    @property
    def sampled(self) -> bool:
        return self.users > 0


def tree_nodes(phases: int, batch: int) -> list[Node]:
    """Every phase's vertices in the order Algorithm 3 visits them.

    The root and the right children draw 2^{−j}·b fresh users; left children copy.
    """
    nodes = []

    def visit(phase: int, depth: int, right: bool) -> None:
        sampled = depth == 0 or right
        nodes.append(Node(phase, depth, right, batch >> depth if sampled else 0, depth == phase))
        if depth < phase:
            visit(phase, depth + 1, False)
            visit(phase, depth + 1, True)

    for phase in range(1, phases + 1):
        visit(phase, 0, False)
    return nodes


class TreeState(NamedTuple):
    """The iterate, the current root-to-node path's (x, v), where the walk is, the
    leaf counter k, and the generator of the selections' Laplace noise."""

    theta: np.ndarray
    path: tuple
    position: int
    leaves: int
    rng: np.random.Generator


@dataclasses.dataclass(frozen=True)
class FrankWolfeL1(Optimizer):
    """Seed 003 Algorithm 3 on the ℓ1 ball of radius R (2d vertices ±R e_j).

    Phase t walks a depth-t binary tree in pre-order. The root's users send
    ∇ℓ(x); each right child's users send ∇ℓ(x_s) − ∇ℓ(x_parent) (SPIDER); left
    children copy their parent's (x, v). Every leaf picks the vertex minimizing
    ⟨c_i, v⟩ + Laplace(λ_t) (report-noisy-max) and steps x ← (1 − η_k)x + η_k c,
    η_k = 2/(k + 1) over a global leaf counter k (notes trap T12; the paper's
    index is inconsistent). The trusted curator sums exactly (`report_noisy_max`
    protocol); only the selections leave it.

    Privacy, per node (each user is in one node): its users move each score of
    the 2^{t−j} selections below it by at most Δ = R·‖Δv‖∞, with ‖Δv‖∞ ≤ 2L∞/b
    at the root and ≤ min(4L∞, 2β₁‖x_s − x_parent‖₁)/|S_s| at a right child, where
    ‖x_s − x_parent‖₁ ≤ D·Σ η_k over the left sibling's leaves (data-independent).
    Each selection is 2Δ/λ-DP (Dwork–Roth Claim 3.9). Theorem 6a's λ_t =
    2LD·2^t/(bε) spends exactly ε at the root, but up to 2ε at right children (two
    gradients per sample); we keep its shape λ_t = κ·2^t and choose κ so that the
    ledger's worst node meets ε, in the run's accounting mode.

    Attributes:
      problem: an ℓ1-ball problem (with lipschitz_inf and smoothness_l1).
      n_users, epsilon, delta: as every optimizer.
      batch: b.
      phases: T.
      scale: κ (λ_t = κ·2^t).
    """

    problem: Problem
    n_users: int
    epsilon: float
    delta: float
    batch: int
    phases: int
    scale: float
    accounting: str = "paper"
    name: ClassVar[str] = "frank_wolfe_l1"
    overrides: ClassVar[frozenset] = frozenset({"batch_size"})  # the tree sets the rounds and steps
    requires: ClassVar[frozenset] = frozenset({NOISY_MAX})

    @classmethod
    def from_config(cls, problem: Problem, n_users: int, epsilon: float, delta: float,
                    rounds: int | None = None, batch_size: int | None = None,
                    step_size: float | None = None, accounting: str = "paper",
                    parameters: str = "paper", protocol=None) -> "FrankWolfeL1":
        """Theorem 6a: b = ⌊n/ln²n⌋, T = ⌊½ log₂(bεβ₁D/(L∞ ln m))⌋ clamped to 1 ≤ T,
        2^T ≤ b and T·b + b·T(T+1)/4 ≤ n users; κ calibrated to the ledger.

        Raises:
          ConfigError: a problem without ℓ1 geometry, rounds or step_size given,
            or too few users for one phase.
        """
        if not hasattr(problem, "lipschitz_inf"):
            raise ConfigError("problem.name", problem.name, f"optimizer {cls.name} needs an ℓ1-ball problem "
                              "(l1_least_squares, l1_least_squares_active)")
        for field, value in (("optimizer.rounds", rounds), ("optimizer.step_size", step_size)):
            if value is not None:
                raise ConfigError(field, value, f"does not apply to optimizer {cls.name} (the tree sets it)")
        batch = batch_size or max(2, int(n_users / math.log(n_users) ** 2))
        candidates = 2 * problem.dim
        target = batch * epsilon * problem.smoothness_l1 * problem.diameter / (
            problem.lipschitz_inf * math.log(candidates))
        phases = max(1, math.floor(0.5 * math.log2(max(target, 1.0))))
        while phases > 1 and (2**phases > batch or _users(phases, batch) > n_users):
            phases -= 1
        if _users(phases, batch) > n_users:
            raise ConfigError("n_users", n_users, f"optimizer {cls.name} needs at least {_users(phases, batch)} "
                              f"users for one phase of batch {batch}")
        draft = cls(problem, n_users, epsilon, delta, batch, phases, 1.0, accounting)
        return dataclasses.replace(draft, scale=draft._calibrated_scale())

    @functools.cached_property
    def nodes(self) -> list[Node]:  # read every round: built once
        return tree_nodes(self.phases, self.batch)

    def _events(self, scale: float) -> list[privacy.events.NoisyMaxDpEvent]:
        """Each sampled node's event, for λ_t = scale·2^t."""
        problem, radius = self.problem, self.problem.radius
        events, leaf = [], 0
        nodes = self.nodes
        steps = _step_sizes(nodes)
        for node in nodes:
            if node.sampled:
                below = 2 ** (node.phase - node.depth)
                if node.depth == 0:
                    spread = 2 * problem.lipschitz_inf
                else:
                    # The left sibling's subtree holds the `below` leaves stepped since the parent.
                    distance = problem.diameter * sum(steps[leaf - below: leaf])
                    spread = min(4 * problem.lipschitz_inf, 2 * problem.smoothness_l1 * distance)
                events.append(privacy.events.NoisyMaxDpEvent(node.users, below, scale * 2**node.phase,
                                              radius * spread / node.users, 2 * problem.dim))
            leaf += node.leaf
        return events

    def _spent(self, scale: float) -> float:
        return max(privacy.mechanisms.composed_epsilon(event, 1, self.delta, self.accounting)
                   for event in self._events(scale))

    def _calibrated_scale(self) -> float:
        """The least κ (to 1e-4 relative) whose worst node spends at most ε."""
        lo, hi = 1e-12, 1e12
        while hi / lo > 1.0 + 1e-4:
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if self._spent(mid) > self.epsilon else (lo, mid)
        return hi

    def schedule(self) -> Schedule:
        groups, first = [], 0
        for node, event in zip([n for n in self.nodes if n.sampled], self._events(self.scale)):
            # A right child's users send a difference of two gradients: norm ≤ 2L.
            bound = self.problem.lipschitz * (1 if node.depth == 0 else 2)
            groups.append(RoundGroup(1, node.users, first, node.users, self.epsilon, self.delta, bound,
                                     noisy_max=(event.leaves, event.scale, event.score_sensitivity,
                                                event.candidates)))
            first += node.users
        return Schedule(SEQUENTIAL, tuple(groups))

    def init(self) -> TreeState:
        return self.start(0)

    def start(self, seed: int) -> TreeState:
        # The selections' noise is the curator's: its own stream, keyed to the run's seed.
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(7,))))
        return TreeState(np.zeros(self.problem.dim), (), 0, 0, rng)

    def query(self, state: TreeState) -> np.ndarray:
        node = self.nodes[state.position]
        return state.theta if node.depth == 0 else np.stack([state.theta, state.path[node.depth - 1][0]])

    def update(self, state: TreeState, noisy_mean: np.ndarray) -> TreeState:
        nodes = self.nodes
        node = nodes[state.position]
        parent = state.path[node.depth - 1][1] if node.depth else 0.0
        theta, leaves, position = state.theta, state.leaves, state.position
        path = state.path[: node.depth] + ((theta, parent + noisy_mean),)
        while True:
            node = nodes[position]
            if node.leaf:
                theta, leaves = self._step(theta, path[node.depth][1], node.phase, leaves, state.rng)
            position += 1
            if position == len(nodes) or nodes[position].sampled:
                return TreeState(theta, path, position, leaves, state.rng)
            child = nodes[position]  # a left child: copies its parent's (x, v); no step since the parent
            path = path[: child.depth] + (path[child.depth - 1],)

    def _step(self, theta, gradient, phase, leaves, rng) -> tuple[np.ndarray, int]:
        """A leaf: report-noisy-max over the 2d vertices, then x ← (1 − η)x + η·vertex."""
        radius = self.problem.radius
        scores = np.concatenate([radius * gradient, -radius * gradient])
        scores += rng.laplace(scale=self.scale * 2**phase, size=scores.size)
        choice = int(np.argmin(scores))
        vertex = np.zeros(self.problem.dim)
        vertex[choice % self.problem.dim] = radius if choice < self.problem.dim else -radius
        eta = 2.0 / (leaves + 2)  # η_k = 2/(k + 1) with k = leaves + 1
        return (1 - eta) * theta + eta * vertex, leaves + 1

    def output(self, state: TreeState) -> np.ndarray:
        return state.theta

    def theory_rate(self) -> float:
        """Theorem 6a: D(L + βD)√(ln d) ln n/√n + √(βLD³ ln d)·ln n/√(nε) (constants 1; ℓ1 constants)."""
        problem, n = self.problem, self.n_users
        lip, beta, diameter = problem.lipschitz_inf, problem.smoothness_l1, problem.diameter
        log_d = math.log(max(problem.dim, 2))
        return (diameter * (lip + beta * diameter) * math.sqrt(log_d) * math.log(n) / math.sqrt(n)
                + math.sqrt(beta * lip * diameter**3 * log_d) * math.log(n) / math.sqrt(n * self.epsilon))

    def hyperparameters(self) -> dict[str, float | int]:
        return {"batch_size": self.batch, "phases": self.phases, "rounds": sum(n.sampled for n in self.nodes),
                "noise_scale": self.scale}


def _users(phases: int, batch: int) -> int:
    """Users the tree draws: Σ_t (b + Σ_{j=1..t} 2^{j−1}·b/2^j) (notes: T·b + b·T(T+1)/4)."""
    return sum(node.users for node in tree_nodes(phases, batch))


def _step_sizes(nodes: list[Node]) -> list[float]:
    """η_k = 2/(k + 1) of every leaf, in order."""
    return [2.0 / (k + 2) for k in range(sum(node.leaf for node in nodes))]
