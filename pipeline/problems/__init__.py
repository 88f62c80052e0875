"""SCO problems: losses, gradients, domains and exact population optima."""
from pipeline.problems.absolute import Absolute
from pipeline.problems.base import Problem
from pipeline.problems.bernoulli import Bernoulli
from pipeline.problems.dataset import Dataset
from pipeline.problems.elastic import Elastic
from pipeline.problems.hard import HardConvex, HardStronglyConvex
from pipeline.problems.l1_least_squares import L1LeastSquares, L1LeastSquaresActive
from pipeline.problems.logistic import Logistic
from pipeline.problems.quadratic import Quadratic

PROBLEMS = {"quadratic": Quadratic, "logistic": Logistic, "absolute": Absolute, "elastic": Elastic,
            "bernoulli": Bernoulli, "l1_least_squares": L1LeastSquares,
            "l1_least_squares_active": L1LeastSquaresActive, "dataset": Dataset,
            "lb_convex": HardConvex, "lb_strongly_convex": HardStronglyConvex}


def build_problem(name: str, dim: int, radius: float) -> Problem:
    """Builds a registered problem.

    Args:
      name: a key of PROBLEMS.
      dim: the dimension d.
      radius: the radius R of the ℓ2-ball domain.

    Returns:
      The problem.

    Raises:
      KeyError: unknown name (config validation rejects it earlier).
    """
    return PROBLEMS[name](dim=dim, radius=radius)


__all__ = ["PROBLEMS", "Absolute", "Bernoulli", "Dataset", "L1LeastSquares", "L1LeastSquaresActive", "Elastic", "HardConvex", "HardStronglyConvex", "Logistic", "Problem", "Quadratic", "build_problem"]
