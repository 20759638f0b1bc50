"""Cross-check with ART's MIFace: with the paper's steps on 1 − p, ours takes the same iterates."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attacks.inversion.mi_face import MIFaceConfig, mi_face


def test_paper_steps_match_art_iterate_for_iterate() -> None:
    pytest.importorskip("art")
    from art.attacks.inference.model_inversion import MIFace
    from art.estimators.classification import PyTorchClassifier

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 4))
    # ART steps up the gradient of the model's output; ending in a softmax makes that p(class).
    probs = nn.Sequential(model, nn.Softmax(dim=1))
    classifier = PyTorchClassifier(
        model=probs, loss=nn.CrossEntropyLoss(), input_shape=(1, 4, 4), nb_classes=4, clip_values=(0.0, 1.0)
    )
    steps = 15
    art = MIFace(
        classifier, max_iter=steps, window_length=1000, threshold=0.999, learning_rate=0.5, batch_size=4, verbose=False
    )
    start = np.full((4, 1, 4, 4), 0.5, dtype=np.float32)
    theirs = art.infer(start.copy(), np.arange(4))
    cfg = MIFaceConfig(
        max_iterations=steps, step_size=0.5, patience=1000, cost_threshold=0.0, start_value=0.5, descend_on="cost"
    )
    ours = mi_face(model, classes=[0, 1, 2, 3], input_shape=(1, 4, 4), config=cfg, seed=0)
    # Every step lowers the cost here, so our best iterate is the last one, as ART's is.
    assert ours.iterations.tolist() == [steps] * 4
    np.testing.assert_allclose(ours.reconstructions, theirs, atol=1e-5)
