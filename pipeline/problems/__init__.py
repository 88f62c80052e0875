"""SCO problems: losses, gradients, domains and exact population optima."""
from pipeline.problems.absolute import Absolute
from pipeline.problems.base import Problem
from pipeline.problems.elastic import Elastic
from pipeline.problems.logistic import Logistic
from pipeline.problems.quadratic import Quadratic

PROBLEMS = {"quadratic": Quadratic, "logistic": Logistic, "absolute": Absolute, "elastic": Elastic}


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


__all__ = ["PROBLEMS", "Absolute", "Elastic", "Logistic", "Problem", "Quadratic", "build_problem"]
