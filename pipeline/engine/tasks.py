"""Independent tasks, such as an audit's batches of trials, run in process or
as Ray tasks (the engine is the only layer that imports ray)."""
from __future__ import annotations

from typing import Any, Callable, Sequence


def map_tasks(function: Callable[..., Any], arguments: Sequence[tuple], backend: str,
              travellers: Sequence[Any] = ()) -> list:
    """function(*args) for every args, the results in order.

    Args:
      function: a module-level function (it travels to the workers by reference).
      arguments: one tuple per task.
      backend: "local" (in this process, one after another) or "ray" (tasks on the Ray
        of ray_pool.ray_address(), as many at once as it has CPUs).
      travellers: objects among the arguments whose classes may be plug-ins defined
        outside the package: they travel by value, so workers need not import them.

    Returns:
      The tasks' results, in the order of `arguments`.
    """
    if backend != "ray":
        return [function(*args) for args in arguments]
    import ray

    from pipeline.engine.ray_pool import ensure_ray, ship_by_value

    ensure_ray()
    ship_by_value(travellers)
    remote = ray.remote(num_cpus=1, max_retries=3)(function)  # a task is a pure function of its arguments
    return ray.get([remote.remote(*args) for args in arguments])
