"""PATE's and DSSGD's values are typed (issue 44): what replaced their untyped dictionaries behaves as the mappings did.

Each check sets the typed path against an independent reading: the zoo's own ``build_model`` called with the same
options, :class:`StudentConfig`'s declared defaults, a config built field by field, a claim rebuilt from a clean
config. The last test keeps the area free of ``dict[str, Any]`` / ``Mapping[str, Any]``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from defenses.dssgd.config import DSSGDConfig
from defenses.dssgd.deployment import dssgd_config
from defenses.networks import build_network
from defenses.pate.aggregators import GNMaxConfig, aggregate
from defenses.pate.config import PATEConfig
from defenses.pate.student import StudentConfig
from dpaudit.models import build_model
from dpaudit.privacy.dssgd import dssgd_svt_claim
from dpaudit.privacy.pate.claim import PATEClaim
from dpaudit.privacy.record_claims import check_record_claim

ROOT = Path(__file__).resolve().parents[2]
#: The PATE and DSSGD code whose dictionaries issue 44 typed.
AREA = (
    "reports/pate.py",
    "dpaudit/app/runs/pate.py",
    "defenses/pate",
    "dpaudit/privacy/pate",
    "attacks/audit/pate.py",
    "defenses/dssgd",
    "dpaudit/app/runs/dssgd.py",
    "dpaudit/privacy/dssgd.py",
    "attacks/federated",
    "defenses/networks.py",
)


def _shapes(module):
    return [tuple(p.shape) for p in module.parameters()], [type(m).__name__ for m in module.modules()]


def test_build_network_builds_what_build_model_builds_with_the_same_options() -> None:
    options = {"hidden": 32, "input_standardization": [0.5, 2.0]}
    typed = build_network("digits-mlp", input_shape=(1, 8, 8), num_classes=10, options=options)
    direct = build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10, **options)
    assert _shapes(typed) == _shapes(direct)
    noisy = build_network("digits-mlp", input_shape=(1, 8, 8), num_classes=10, options={"noise_layer": True})
    assert _shapes(noisy) == _shapes(build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10, noise_layer=True))
    with pytest.raises(TypeError, match="noise_layer must be a bool, got 'yes'"):
        build_network("digits-mlp", input_shape=(1, 8, 8), num_classes=10, options={"noise_layer": "yes"})


def test_a_pate_student_takes_studentconfig_defaults_for_what_is_left_unset() -> None:
    declared = {f.name: f.default for f in dataclasses.fields(StudentConfig)}
    # Stored as the values they stand for: every unset student field is StudentConfig's declared default.
    config = PATEConfig(semi_supervised=True)
    student = config.student_config()
    assert student.semi_supervised is True
    assert (student.epochs, student.batch_size, student.learning_rate) == (
        declared["epochs"],
        declared["batch_size"],
        declared["learning_rate"],
    )
    assert (student.unlabeled_weight, student.unlabeled_ratio, student.confidence) == (
        declared["unlabeled_weight"],
        declared["unlabeled_ratio"],
        declared["confidence"],
    )
    given = PATEConfig(student_epochs=3, student_batch_size=7, pseudo_label_confidence=0.5).student_config()
    assert (given.epochs, given.batch_size, given.confidence) == (3, 7, 0.5)
    # The teachers' SGD is the config's own fields; epochs must be planned first.
    teacher = PATEConfig(epochs=4, batch_size=16, learning_rate=0.1, momentum=0.5, weight_decay=0.01).teacher_config()
    assert (teacher.epochs, teacher.batch_size, teacher.learning_rate, teacher.momentum, teacher.weight_decay) == (
        4,
        16,
        0.1,
        0.5,
        0.01,
    )
    with pytest.raises(ValueError, match="epochs is derived"):
        PATEConfig().teacher_config()
    with pytest.raises(ValueError, match="batch_size"):
        PATEConfig(student_batch_size=0)


def test_an_aggregation_keeps_its_config_and_writes_the_same_json() -> None:
    import numpy as np

    config = GNMaxConfig(sigma=3.0)
    agg = aggregate(np.array([[5, 1, 0], [0, 6, 0]]), config, seed=1)
    assert agg.config == config
    assert agg.to_dict()["config"] == {"aggregator": "gnmax", "sigma": 3.0}


def test_a_flower_run_config_reads_into_the_same_dssgd_config() -> None:
    run_config = {"participants": 4, "rounds": 3, "upload-fraction": 0.25, "dp-epsilon": 0, "selection": "largest"}
    assert dssgd_config(run_config) == DSSGDConfig(participants=4, rounds=3, upload_fraction=0.25, dp_epsilon=None)
    assert dssgd_config({"dp-epsilon": 0.5, "bound": 0.01}) == DSSGDConfig(dp_epsilon=0.5, bound=0.01)
    with pytest.raises(ValueError, match="participants"):
        dssgd_config({"participants": 0})


def test_a_claim_rebuild_names_a_config_value_of_the_wrong_type() -> None:
    orders = (2.0, 4.0)
    pate = PATEClaim(
        aggregator="gnmax",
        parameters={"sigma": 40.0},
        num_queries=30,
        num_answered=30,
        orders=orders,
        rdp=tuple(30 * o / 40.0**2 for o in orders),
        analysis="data-independent",
    )
    config = {"aggregator": "gnmax", "sigma": 40.0, "queries": 30, "delta": 1e-5, "analysis": "data-independent"}
    metrics = {"num_queries": 30, "num_answered": 30, "epsilon_data_independent": pate.epsilon(delta=1e-5)}
    check_record_claim(pate, config=config, metrics=metrics, num_members=100)  # the clean config holds
    with pytest.raises(ValueError, match="config target_epsilon='2' is not a number"):
        check_record_claim(pate, config={**config, "target_epsilon": "2"}, metrics=metrics, num_members=100)
    dssgd = dssgd_svt_claim(
        epsilon_per_parameter=1.0, bound=0.001, threshold=3.0, uploads_per_round=961, num_rounds=2, num_parameters=9610
    )
    base = {"dp_epsilon": 1.0, "bound": 0.001, "threshold": 3.0, "budget_split": "sum", "rounds": 2}
    counts = {"uploads_per_turn": 961, "num_parameters": 9610}
    check_record_claim(dssgd, config=base, metrics=counts, num_members=100)
    with pytest.raises(ValueError, match="config rounds=2.5 is not an integer"):
        check_record_claim(dssgd, config={**base, "rounds": 2.5}, metrics=counts, num_members=100)
    with pytest.raises(ValueError, match="config target_epsilon='3' is not a number"):
        check_record_claim(dssgd, config={**base, "target_epsilon": "3"}, metrics=counts, num_members=100)


def test_the_pate_and_dssgd_code_holds_no_untyped_dictionary() -> None:
    pattern = re.compile(r"(dict|Mapping|MutableMapping|Dict)\[str, *['\"]?Any['\"]?\]")
    files = [p for entry in AREA for p in ([ROOT / entry] if entry.endswith(".py") else (ROOT / entry).rglob("*.py"))]
    assert len(files) > 20, files  # the area was found
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)
