import pytest
import torch
from torch import nn

from dpaudit.models import MODELS, Projection, build_model

SHAPES = {
    "abadi-mnist": ((1, 28, 28), 10),
    "hgm-cnn": ((1, 28, 28), 10),
    "cifar10-cnn": ((3, 32, 32), 10),
    "digits-mlp": ((1, 8, 8), 10),
    "faces-mlp": ((1, 112, 92), 40),
    "tabular-mlp": ((104,), 2),
}


def test_every_zoo_model_is_covered():
    assert set(SHAPES) == set(MODELS)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_forward_shape_and_no_batchnorm(name):
    shape, k = SHAPES[name]
    model = build_model(name, input_shape=shape, num_classes=k)
    out = model(torch.rand(3, *shape))
    assert out.shape == (3, k)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def test_hgm_cnn_matches_the_paper_architecture():
    model = build_model("hgm-cnn", input_shape=(1, 28, 28), num_classes=10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    fcs = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(c.out_channels, c.kernel_size) for c in convs] == [(32, (5, 5)), (64, (5, 5))]
    assert [f.out_features for f in fcs] == [256, 10]


def test_abadi_pca_projection_is_a_fixed_buffer():
    model = build_model("abadi-mnist", input_shape=(1, 28, 28), num_classes=10, pca_components=60)
    proj = next(m for m in model.modules() if isinstance(m, Projection))
    assert proj.matrix.shape == (60, 784)
    assert all(p.shape != (60, 784) for p in model.parameters())
    assert next(m for m in model.modules() if isinstance(m, nn.Linear)).in_features == 60
    hidden = [m for m in model.modules() if isinstance(m, nn.Linear)][0]
    assert hidden.out_features == 1000


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "resnet"}, "model"),
        ({"name": "hgm-cnn", "input_shape": (64,)}, "input_shape"),
        ({"name": "digits-mlp", "num_classes": 1}, "num_classes"),
        ({"name": "digits-mlp", "input_shape": (0, 8)}, "input_shape"),
        ({"name": "digits-mlp", "depth": 3}, "depth"),
        ({"name": "abadi-mnist", "pca_components": 1000}, "pca_components"),
    ],
)
def test_bad_model_arguments(kwargs, match):
    kw = {"input_shape": (1, 8, 8), "num_classes": 10, **kwargs}
    name = kw.pop("name")
    with pytest.raises(ValueError, match=match):
        build_model(name, **kw)
