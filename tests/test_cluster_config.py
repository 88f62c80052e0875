"""cluster.yaml validates against Ray's own cluster-launcher schema."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import ray.autoscaler
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())


def _cluster_text() -> str:
    return (ROOT / "cluster.yaml").read_text()


def test_cluster_yaml_is_a_valid_ray_cluster_config():
    config = yaml.safe_load(_cluster_text())
    jsonschema.validate(config, SCHEMA)
    assert config["provider"]["type"] == "local"
    # Every node installs this package with the pinned numeric stack, so actors import the driver's code
    # and draw the driver's streams (README, "Reproducibility").
    assert any("pip install -c ~/shuffle-sco/constraints.txt -e ~/shuffle-sco" in command
               for command in config["setup_commands"])
    assert config["file_mounts"] == {"~/shuffle-sco": "."}
    assert config["rsync_filter"] == [".gitignore"]  # no .venv/, results/ or mlflow.db copied to every node


def test_the_commented_cloud_example_is_valid_too():
    text = _cluster_text()
    block = text[text.index("# BEGIN CLOUD EXAMPLE") + len("# BEGIN CLOUD EXAMPLE\n"): text.index("# END CLOUD EXAMPLE")]
    cloud = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    config = {**yaml.safe_load(text), **cloud}
    jsonschema.validate(config, SCHEMA)
    assert config["provider"]["type"] == "aws" and config["head_node_type"] in config["available_node_types"]


def test_the_schema_has_teeth():
    config = yaml.safe_load(_cluster_text())
    config["provider"] = {"type": "local", "head_ip": 10}
    config["no_such_field"] = True
    try:
        jsonschema.validate(config, SCHEMA)
    except jsonschema.ValidationError:
        return
    raise AssertionError("Ray's schema accepted an invalid config")
