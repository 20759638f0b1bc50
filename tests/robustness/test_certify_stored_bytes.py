"""The certify run's stored files keep their bytes now that they are written by the type-derived codec.

The two documents below were written by the hand-written ``to_dict`` methods the codec replaced
(``summary.json`` and ``certify-METHOD.json``, key order, nulls and the ``"inf"`` spelling
included); reading them and writing them again must give the same text, or stored runs would
no longer match what a rerun writes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit.results.certification import CertificationResult, save_certification_result
from dpaudit.results.certify_summary import (
    UNNAMED_PREDICTION_RULE,
    CertifySummary,
    SoundnessViolation,
    load_certify_summary,
    save_certify_summary,
)

SUMMARY_JSON = """\
{
  "schema_version": 1,
  "model_id": "hgm-digits-digits-mlp-seed0-b11d68fe",
  "defense": "hgm",
  "dataset": "digits",
  "norm": "l2",
  "radii": [
    0.1,
    0.2
  ],
  "num_examples": 4,
  "num_draws": 100,
  "confidence": 0.95,
  "bound": "clopper-pearson",
  "seed": 0,
  "epsilon": "inf",
  "delta": null,
  "mechanism": "hgm",
  "sensitivity": 1.5,
  "noise_std": 0.75,
  "noise_per_sensitivity": 0.5,
  "robustness_epsilon": 1.0,
  "robustness_delta": 0.05,
  "attack_norm_bound": 0.3,
  "redistribute": true,
  "draws_per_second": null,
  "conventional_accuracy": 0.75,
  "certified_accuracy": {
    "0.1": 0.5,
    "0.2": 0.5
  },
  "robust_accuracy": {
    "fgsm": {
      "0.1": 0.5,
      "0.2": 0.25
    }
  },
  "seconds": 2.5,
  "prediction_rule": "vote-count argmax over the 100 certification draws",
  "smoothing": {
    "conventional_accuracy": 0.75,
    "certified_accuracy": {
      "0.1": 0.5,
      "0.2": 0.25
    },
    "confidence": 0.999,
    "num_selection_draws": 100,
    "prediction_rule": "CERTIFY: vote-count argmax over 100 selection draws, abstaining where p_A <= 1/2"
  },
  "soundness_violations": [
    {
      "certificate": "hgm",
      "radius": 0.2,
      "certified_accuracy": 0.5,
      "robust_accuracy": 0.25
    }
  ]
}
"""

CERTIFICATE_JSON = """\
{
  "schema_version": 1,
  "method": "hgm",
  "norm": "l2",
  "num_draws": 100,
  "confidence": 0.95,
  "config": {
    "num_draws": 100,
    "weights_sha256": "0000000000000000000000000000000000000000000000000000000000000000",
    "dataset_files": {
      "t10k.gz": "ab"
    },
    "prediction_rule": "vote-count argmax over the 100 certification draws",
    "max_epsilon": null,
    "sensitivity": 1.5,
    "seconds": 3
  },
  "arrays": "certify-hgm.npz"
}
"""


def test_a_stored_summary_is_written_again_byte_for_byte(tmp_path):
    summary = CertifySummary.from_dict(json.loads(SUMMARY_JSON))
    assert summary.epsilon == float("inf") and summary.delta is None and summary.smoothing is not None
    assert summary.soundness_violations == (
        SoundnessViolation(certificate="hgm", radius=0.2, certified_accuracy=0.5, robust_accuracy=0.25),
    )
    path = save_certify_summary(summary, tmp_path)
    assert path.read_text() == SUMMARY_JSON
    assert load_certify_summary(tmp_path) == summary


def test_a_summary_of_the_oldest_form_reads_typed(tmp_path):
    data = json.loads(SUMMARY_JSON)
    # Before rules were named and violations were objects: lists, and no prediction_rule anywhere.
    data["soundness_violations"] = [["hgm", 0.2, 0.5, 0.25]]
    del data["prediction_rule"], data["smoothing"]["prediction_rule"], data["schema_version"]
    summary = CertifySummary.from_dict(data)
    assert summary.prediction_rule == summary.smoothing.prediction_rule == UNNAMED_PREDICTION_RULE
    assert summary.soundness_violations[0].robust_accuracy == 0.25
    # Written again, it takes the current form: only the three keys the old file lacked differ.
    again = json.loads(save_certify_summary(summary, tmp_path).read_text())
    want = json.loads(SUMMARY_JSON)
    want["prediction_rule"] = want["smoothing"]["prediction_rule"] = UNNAMED_PREDICTION_RULE
    assert again == want and list(again) == list(want)


@pytest.mark.parametrize("missing", ["seconds", "robust_accuracy", "radii"])
def test_a_summary_missing_a_measured_field_is_refused_by_name(missing):
    data = json.loads(SUMMARY_JSON)
    del data[missing]
    with pytest.raises(ValueError, match=missing):
        CertifySummary.from_dict(data)


def test_a_stored_certificate_is_written_again_byte_for_byte(tmp_path):
    arrays = {
        "labels": np.array([0, 1, 2, 1]),
        "predictions": np.array([0, -1, 2, 0]),
        "radii": np.array([0.3, 0.0, 0.1, 0.2]),
    }
    result = CertificationResult.from_dict({**json.loads(CERTIFICATE_JSON), **arrays})
    assert result.config["dataset_files"] == {"t10k.gz": "ab"} and result.radii.dtype == np.float64
    assert save_certification_result(result, tmp_path).read_text() == CERTIFICATE_JSON
